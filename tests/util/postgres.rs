//! A scratch cluster of Debian's PostgreSQL 15 (installed by `scripts/setup
//! --tests`) for the server tests: initdb as postgres into DIR/data, the
//! server on DIR's unix socket and the port given, stopped when dropped.

use std::path::Path;
use std::process::Command;

pub const PG: &str = "/usr/lib/postgresql/15/bin";

/// A scratch cluster, stopped when dropped.
pub struct Cluster {
    pub data: String,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = as_postgres(&format!("{PG}/pg_ctl"), &["-D", &self.data, "-m", "immediate", "stop"]).output();
    }
}

pub fn as_postgres(cmd: &str, args: &[&str]) -> Command {
    let mut c = Command::new("runuser");
    c.args(["-u", "postgres", "--", cmd]).args(args);
    c
}

pub fn run_ok(mut c: Command, what: &str) -> String {
    let out = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(out.status.success(), "{what} failed: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `q` through DIR's unix socket on `port`: its rows, unaligned.
pub fn sql(dir: &Path, port: &str, q: &str) -> String {
    let mut c = Command::new("psql");
    c.args(["-h", dir.to_str().unwrap(), "-p", port, "-U", "postgres", "-d", "postgres", "-Atc", q]);
    run_ok(c, q).trim().to_string()
}

/// initdb (with `initdb_more`) into DIR/data, owned by postgres (initdb
/// refuses root), and the server started on DIR's socket and `port`
/// with `server_opts` (`-c name=value`...).
pub fn start(dir: &Path, port: &str, initdb_more: &[&str], server_opts: &str) -> Cluster {
    let mut chown = Command::new("chown");
    chown.arg("postgres").arg(dir);
    run_ok(chown, "chown");
    let d = dir.display().to_string();
    let data = format!("{d}/data");
    run_ok(as_postgres(&format!("{PG}/initdb"), &[&["-D", &data, "-A", "trust"], initdb_more].concat()), "initdb");
    let opts = format!("-k {d} -p {port} {server_opts}");
    run_ok(as_postgres(&format!("{PG}/pg_ctl"), &["-D", &data, "-l", &format!("{d}/log"), "-o", &opts, "-w", "start"]), "pg_ctl start");
    Cluster { data }
}
