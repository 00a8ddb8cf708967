//! What a PostgreSQL backend waits on (issue 43's server check): a
//! scratch cluster of Debian's PostgreSQL 15 (installed by `scripts/setup
//! --tests`) listening on 127.0.0.1, `pgbench -c 2` against it over TCP,
//! one of its backends profiled by pid with `wallclock`: the WAL flush's
//! time (fdatasync) must lie under a WAL segment of the cluster's
//! `pg_wal/`, and the wait for the client (the backend's epoll_wait on its
//! socket beside its latch) under the client's address, `tcp
//! 127.0.0.1:PORT`, in the folded stacks and the report. Loads real BPF
//! programs: run as root; skips, saying so, where PostgreSQL 15 is not
//! installed.

mod util;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use util::postgres::{as_postgres, run_ok, Cluster, PG};

/// A TCP port free on 127.0.0.1 now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn sql(dir: &Path, port: u16, q: &str) -> String {
    util::postgres::sql(dir, &port.to_string(), q)
}

/// The scratch cluster on DIR's unix socket and on 127.0.0.1:port;
/// pgbench's tables (scale 1).
fn start(dir: &Path, port: u16) -> Cluster {
    let p = port.to_string();
    let c = util::postgres::start(dir, &p, &["-N"], "-c listen_addresses=127.0.0.1");
    run_ok(as_postgres("pgbench", &["-h", "127.0.0.1", "-p", &p, "-i", "-s", "1", "-q", "postgres"]), "pgbench -i");
    c
}

/// The backends running pgbench's transactions (not the connection it
/// opens first to read the scale): (pid, client port), `n` of them.
fn backends(dir: &Path, port: u16, n: usize) -> Vec<(u32, u16)> {
    for _ in 0..100 {
        let rows = sql(
            dir,
            port,
            "select pid, client_port from pg_stat_activity where application_name = 'pgbench' \
             and query ~ '^(BEGIN|END|UPDATE|INSERT|SELECT abalance)' order by pid",
        );
        let v: Vec<(u32, u16)> = rows
            .lines()
            .filter_map(|l| {
                let (p, c) = l.split_once('|')?;
                Some((p.parse().ok()?, c.parse().ok()?))
            })
            .collect();
        if v.len() >= n {
            return v;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no {n} pgbench backends");
}

/// The folded lines' values: of those `pick` takes, the sum, and the sum
/// of those `own` also takes.
fn shares(folded: &str, pick: impl Fn(&str) -> bool, own: impl Fn(&str) -> bool) -> (u64, u64) {
    let mut all = 0;
    let mut mine = 0;
    for l in folded.lines() {
        let Some((stack, v)) = l.rsplit_once(' ') else { continue };
        let v: u64 = v.parse().unwrap_or(0);
        if pick(stack) {
            all += v;
            if own(stack) {
                mine += v;
            }
        }
    }
    (all, mine)
}

#[test]
fn pgbench_backend_waits_on_its_wal_and_its_client() {
    if util::skip_without_root("PostgreSQL objects") {
        return;
    }
    if !Path::new(&format!("{PG}/postgres")).exists() || !Path::new("/usr/bin/pgbench").exists() {
        util::skipped(&format!("PostgreSQL 15 is not installed ({PG}/postgres, /usr/bin/pgbench): `sudo scripts/setup --tests` installs it"));
        return;
    }
    let dir = util::scratch("objects-postgres");
    let port = free_port();
    let _cluster = start(&dir, port);
    let mut bench = Command::new("pgbench")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-c", "2", "-T", "4", "postgres"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let bs = backends(&dir, port, 2);
    let (backend, client_port) = bs[0];
    let prefix = dir.join("pg");
    let out = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["-d", "2", "--prefix", prefix.to_str().unwrap(), &backend.to_string()])
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .output()
        .unwrap();
    let _ = bench.wait();
    assert!(out.status.success(), "wallclock failed: {}", String::from_utf8_lossy(&out.stderr));

    let wal = format!("[file {}/data/pg_wal/", dir.display());
    let client = format!("[tcp 127.0.0.1:{client_port}");
    let folded = std::fs::read_to_string(dir.join("pg.folded")).unwrap();
    // The WAL flush: the off-CPU time in fdatasync's kernel path with an
    // object, under a WAL segment.
    let (flush, on_wal) = shares(&folded, |s| s.contains("__x64_sys_fdatasync_[k]") && s.ends_with("]_[o]") && s.contains(";[file "), |s| s.contains(&wal));
    // The wait for the client: the off-CPU time under secure_read (its
    // recv, and its epoll_wait on the socket beside its latch), under the
    // client's address. (A heavyweight lock's wait, ProcSleep's
    // epoll_wait on the latch alone, is no wait for the client.)
    let (wait, on_client) = shares(&folded, |s| s.ends_with("]_[o]") && s.contains(";secure_read;"), |s| s.contains(&client));
    let sec = |ns: u64| ns as f64 / 1e6;
    eprintln!(
        "backend {backend} (client port {client_port}): fdatasync {:.3} s, {:.3} s under {wal}...; client waits {:.3} s, {:.3} s under {client}",
        sec(flush),
        sec(on_wal),
        sec(wait),
        sec(on_client)
    );
    assert!(flush > 0, "no fdatasync with an object in the backend's stacks:\n{folded}");
    assert!(on_wal as f64 >= 0.95 * flush as f64, "{on_wal} of {flush} of fdatasync's time under {wal}:\n{folded}");
    assert!(wait > 0, "no wait for the client in the backend's stacks:\n{folded}");
    assert!(on_client as f64 >= 0.95 * wait as f64, "{on_client} of {wait} of the client waits under {client}:\n{folded}");

    // The report's WAITED ON section names both.
    let report = std::fs::read_to_string(dir.join("pg_single_thread_analysis.txt")).unwrap();
    let section: Vec<&str> = report.lines().skip_while(|l| !l.starts_with("WAITED ON")).take_while(|l| !l.is_empty()).collect();
    eprintln!("{}", section.iter().take(8).copied().collect::<Vec<_>>().join("\n"));
    assert!(section.iter().any(|l| l.contains(&wal)), "no WAL segment in the report's WAITED ON:\n{report}");
    assert!(section.iter().any(|l| l.contains(&client)), "no {client} in the report's WAITED ON:\n{report}");
}
