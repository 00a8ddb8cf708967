//! Spans on a real server: Debian's PostgreSQL 15, whose USDT probes
//! `postgresql:query__start` and `query__done` are guarded by semaphores
//! (they fire only while a tracer raises them), under pgbench (installed
//! by `scripts/setup --tests`, which `scripts/test` runs). One backend
//! serves one pgbench client; the client is stopped (SIGSTOP) outside the
//! capture, so the statements its backend ran in the window are exactly
//! the rise of pg_stat_statements' calls between two reads around it.

mod util;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use util::postgres::{as_postgres, run_ok, Cluster, PG};

const PORT: &str = "54371";

fn sql(dir: &Path, q: &str) -> String {
    util::postgres::sql(dir, PORT, q)
}

fn start(dir: &Path) -> Cluster {
    for p in [format!("{PG}/postgres"), "/usr/bin/pgbench".into()] {
        assert!(Path::new(&p).exists(), "{p} is not installed: run `sudo scripts/setup --tests` (scripts/test does)");
    }
    let c = util::postgres::start(dir, PORT, &[], "-c listen_addresses='' -c shared_preload_libraries=pg_stat_statements");
    sql(dir, "create extension pg_stat_statements");
    let d = dir.display().to_string();
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
    let backend = bench_backend(&dir);
    let client = bench.id();
    signal(client, "-STOP");
    std::thread::sleep(Duration::from_millis(300));
    let before = statements(&dir);

    let prefix = dir.join("pg");
    let mut wc = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["--span", "usdt:postgresql:query__start ~~ usdt:postgresql:query__done", "--slower-than", "1ms", "-d", "4", "--prefix"])
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

/// The backend running pgbench's transactions: not the one pgbench opens
/// first to read the scale and closes (a capture of that one ends with it).
fn bench_backend(dir: &Path) -> String {
    for _ in 0..100 {
        let b = sql(
            dir,
            "select pid from pg_stat_activity where application_name = 'pgbench' \
             and query ~ '^(BEGIN|END|UPDATE|INSERT|SELECT abalance)' order by backend_start desc limit 1",
        );
        if !b.is_empty() {
            return b;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no pgbench backend");
}

/// Issue 28: the backend keeps running through the capture (not paused),
/// attached by pid, 5 s. The statements it ran in the window are counted
/// from pgbench's own per-transaction log (`-l`: each transaction's end,
/// wall clock, and latency) mapped onto the window: a transaction of the
/// default script is 7 statements (BEGIN, 3 UPDATEs, a SELECT, an INSERT,
/// END); one across an edge has some of them in the window, so the count
/// is a range. Every span that opens and closes in the window is recorded.
#[test]
fn postgres_spans_under_continuous_load() {
    if util::skip_without_root("PostgreSQL spans") {
        return;
    }
    let dir = util::scratch("spans-postgres-load");
    let _cluster = start(&dir);
    let d = dir.display().to_string();
    let mut bench: Child = Command::new("pgbench")
        .args(["-h", &d, "-p", PORT, "-U", "postgres", "-c", "1", "-T", "9", "-l", "--log-prefix"])
        .arg(dir.join("pgb"))
        .arg("postgres")
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let backend = bench_backend(&dir);
    std::thread::sleep(Duration::from_millis(500));
    let out = dir.join("off.jsonl");
    let cap = Command::new(util::bin("offcputime"))
        .args(["--probe", "usdt:postgresql:query__start ~~ usdt:postgresql:query__done", "-p", &backend, "-d", "5", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&cap.stderr);
    eprintln!("{stderr}");
    assert!(cap.status.success(), "offcputime failed");
    assert!(bench.wait().unwrap().success(), "pgbench failed");

    let recs: Vec<serde_json::Value> = std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let h = &recs[0];
    let (s, e) = (h["start_ns"].as_u64().unwrap(), h["end_ns"].as_u64().unwrap());
    let real0 = h["start_realtime_ns"].as_u64().unwrap();
    let spans = recs.iter().filter(|r| r["type"] == "span").count() as u64;
    // The window in pgbench's clock (wall clock, us).
    let (ws, we) = (real0 / 1000, (real0 + (e - s)) / 1000);
    let (mut inside, mut across) = (0u64, 0u64);
    for f in std::fs::read_dir(&dir).unwrap() {
        let f = f.unwrap();
        if !f.file_name().to_string_lossy().starts_with("pgb") {
            continue;
        }
        for l in std::fs::read_to_string(f.path()).unwrap().lines() {
            // client_id transaction_no latency_us script_no epoch_s us
            let v: Vec<u64> = l.split_whitespace().map(|x| x.parse().unwrap()).collect();
            let end = v[4] * 1_000_000 + v[5];
            let begin = end - v[2];
            if begin >= ws && end <= we {
                inside += 1;
            } else if end > ws && begin < we {
                across += 1;
            }
        }
    }
    let (lo, hi) = (7 * inside, 7 * (inside + across));
    let stats = recs.iter().find(|r| r["type"] == "stats").unwrap();
    eprintln!(
        "spans {spans}; statements in the window by pgbench's log {lo}..{hi} ({inside} transactions inside, {across} across an edge); probe stats: drops {} unmatched {} too deep {} map full {}",
        stats["counts"]["probe_drops"], stats["counts"]["probe_unmatched_exits"], stats["counts"]["probe_spans_too_deep"], stats["counts"]["probe_map_full"]
    );
    assert!(lo > 100, "pgbench ran only {lo} statements in the window");
    assert!(spans as f64 >= lo as f64 * 0.995 && spans as f64 <= hi as f64 * 1.005, "{spans} spans for {lo}..{hi} statements");
    assert!(!stderr.contains("not recorded"), "a probe event was not recorded: {stderr}");
}
