//! Spans on a real server: Debian's PostgreSQL 15, whose USDT probes
//! `postgresql:query__start` and `query__done` are guarded by semaphores
//! (they fire only while a tracer raises them), under pgbench (installed
//! by `scripts/setup --tests`, which `scripts/test` runs). One backend
//! serves one pgbench client; the client is stopped (SIGSTOP) outside the
//! capture, so the statements its backend ran in the window are exactly
//! the rise of pg_stat_statements' calls between two reads around it.

mod util;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const PG: &str = "/usr/lib/postgresql/15/bin";
const PORT: &str = "54371";

/// A scratch cluster, stopped when dropped.
struct Cluster {
    dir: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = as_postgres(&format!("{PG}/pg_ctl"), &["-D", &format!("{}/data", self.dir.display()), "-m", "immediate", "stop"]).output();
    }
}

fn as_postgres(cmd: &str, args: &[&str]) -> Command {
    let mut c = Command::new("runuser");
    c.args(["-u", "postgres", "--", cmd]).args(args);
    c
}

fn run_ok(mut c: Command, what: &str) -> String {
    let out = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(out.status.success(), "{what} failed: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sql(dir: &Path, q: &str) -> String {
    let d = dir.display().to_string();
    let mut c = Command::new("psql");
    c.args(["-h", &d, "-p", PORT, "-U", "postgres", "-d", "postgres", "-Atc", q]);
    run_ok(c, q).trim().to_string()
}

fn start(dir: &Path) -> Cluster {
    for p in [format!("{PG}/postgres"), "/usr/bin/pgbench".into()] {
        assert!(Path::new(&p).exists(), "{p} is not installed: run `sudo scripts/setup --tests` (scripts/test does)");
    }
    // initdb refuses root: the cluster is postgres's.
    let mut chown = Command::new("chown");
    chown.arg("postgres").arg(dir);
    run_ok(chown, "chown");
    let d = dir.display().to_string();
    run_ok(as_postgres(&format!("{PG}/initdb"), &["-D", &format!("{d}/data"), "-A", "trust"]), "initdb");
    let opts = format!("-k {d} -p {PORT} -c listen_addresses='' -c shared_preload_libraries=pg_stat_statements");
    run_ok(as_postgres(&format!("{PG}/pg_ctl"), &["-D", &format!("{d}/data"), "-l", &format!("{d}/log"), "-o", &opts, "-w", "start"]), "pg_ctl start");
    let c = Cluster { dir: dir.to_path_buf() };
    sql(dir, "create extension pg_stat_statements");
    run_ok(as_postgres("pgbench", &["-h", &d, "-p", PORT, "-i", "-s", "1", "-q", "postgres"]), "pgbench -i");
    c
}

fn signal(pid: u32, sig: &str) {
    let mut kill = Command::new("kill");
    kill.args([sig, &pid.to_string()]);
    run_ok(kill, "kill");
}

/// The statements pgbench's backend has run (pg_stat_statements' calls
/// of everything but the reads of the view itself).
fn statements(dir: &Path) -> u64 {
    sql(dir, "select coalesce(sum(calls), 0) from pg_stat_statements where query not like '%pg_stat_statements%'").parse().unwrap()
}

#[test]
fn postgres_query_spans_under_pgbench() {
    if util::skip_without_root("PostgreSQL spans") {
        return;
    }
    let dir = util::scratch("spans-postgres");
    let _cluster = start(&dir);
    let d = dir.display().to_string();
    // One client, one backend; held until the capture is attached. Run
    // by this process itself (runuser would stand between it and the
    // signals that hold it).
    let mut bench: Child = Command::new("pgbench")
        .args(["-h", &d, "-p", PORT, "-U", "postgres", "-c", "1", "-T", "30", "postgres"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The client's backend, not the one pgbench opens first to read the
    // scale and closes (a capture of that one ends with it): the one
    // running the transaction's statements.
    let mut backend = String::new();
    for _ in 0..100 {
        backend = sql(
            &dir,
            "select pid from pg_stat_activity where application_name = 'pgbench' \
             and query ~ '^(BEGIN|END|UPDATE|INSERT|SELECT abalance)' order by backend_start desc limit 1",
        );
        if !backend.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!backend.is_empty(), "no pgbench backend");
    let client = bench.id();
    signal(client, "-STOP");
    std::thread::sleep(Duration::from_millis(300));
    let before = statements(&dir);

    let prefix = dir.join("pg");
    let mut wc = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["--span", "usdt:postgresql:query__start ~~ usdt:postgresql:query__done", "--slower-than", "1ms", "-d", "4", "-o"])
        .arg(&prefix)
        .arg(&backend)
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(wc.stderr.take().unwrap());
    let mut log = String::new();
    loop {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap() == 0 {
            panic!("wallclock ended before capturing:\n{log}");
        }
        log.push_str(&line);
        if line.contains("capturing pid") {
            break;
        }
    }
    signal(client, "-CONT");
    std::thread::sleep(Duration::from_millis(2500));
    signal(client, "-STOP");
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let status = wc.wait().unwrap();
    log.push_str(&rest.join().unwrap());
    let ran = statements(&dir) - before;
    let _ = bench.kill();
    let _ = bench.wait();
    assert!(status.success(), "wallclock failed:\n{log}");

    let report = std::fs::read_to_string(dir.join("pg_single_thread_analysis.txt")).unwrap();
    let head = report.lines().find(|l| l.starts_with("SPANS usdt:postgresql:query__start")).unwrap_or_else(|| panic!("no SPANS section:\n{report}"));
    let spans: u64 = head.rsplit(": ").next().unwrap().trim_end_matches(" spans").parse().unwrap();
    eprintln!("{}", report.lines().skip_while(|l| !l.starts_with("SPANS")).take(12).collect::<Vec<_>>().join("\n"));
    eprintln!("spans {spans}, statements by pg_stat_statements {ran}");
    assert!(ran > 100, "pgbench ran only {ran} statements in the window");
    assert!(spans.abs_diff(ran) as f64 <= 0.01 * ran as f64, "{spans} spans for {ran} statements");

    // The slow queries' time is named: the commit's WAL flush (XLogFlush,
    // fdatasync) when any statement was slow.
    let folded = std::fs::read_to_string(dir.join("pg.spans.folded")).unwrap();
    if !folded.is_empty() {
        assert!(folded.lines().all(|l| l.starts_with("usdt:postgresql:query__start ~~ usdt:postgresql:query__done;")));
        let named = ["XLogFlush", "fdatasync", "secure_read", "LockAcquire", "ProcSleep"];
        assert!(named.iter().any(|n| folded.contains(n)), "no WAL flush, socket or lock wait among the slow queries' stacks:\n{folded}");
    }
}
