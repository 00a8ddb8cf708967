//! A real server from Debian, profiled as a user would: `redis-server`
//! driven by `redis-benchmark -c 1` over loopback, captured by
//! `scripts/wallclock PID` with its default flags. (Installed by
//! `scripts/setup --tests`, which `scripts/test` runs.)

mod util;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Throughput may drop by at most this much while the capture runs: half of
/// what libbpf-tools' offcputime costs in a context-switch storm (50-60% in
/// scripts/bench-capture on these machines). A 1-client request loop is a
/// switch storm of its own: every request blocks both sides.
const OVERHEAD_BUDGET: f64 = 0.25;

struct Redis {
    child: Child,
    port: u16,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn need(tool: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output().unwrap();
    let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!p.is_empty(), "{tool} is not installed: run `sudo scripts/setup --tests` (scripts/test does)");
    p
}

fn start_redis(dir: &Path) -> Redis {
    let port = 20000 + (std::process::id() % 20000) as u16;
    let child = Command::new(need("redis-server"))
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server");
    let r = Redis { child, port };
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        let out = Command::new("redis-cli").args(["-p", &port.to_string(), "ping"]).output();
        if out.is_ok_and(|o| o.stdout.starts_with(b"PONG")) {
            return r;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("redis-server did not answer on port {port}");
}

/// GET requests per second of one client doing `n` requests.
fn bench(port: u16, n: u64) -> f64 {
    let out = Command::new(need("redis-benchmark"))
        .args(["-p", &port.to_string(), "-c", "1", "-n", &n.to_string(), "-t", "get", "--csv"])
        .output()
        .expect("redis-benchmark");
    assert!(out.status.success(), "redis-benchmark: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    // "test","rps",...  then  "GET","41322.31",...
    let line = text.lines().find(|l| l.starts_with("\"GET\"")).unwrap_or_else(|| panic!("no GET line in {text}"));
    line.split(',').nth(1).unwrap().trim_matches('"').parse().unwrap()
}

/// `runs` benchmark runs: interference from the rest of the machine (CI
/// runs other builds beside this) only ever slows a run, so the fastest of
/// a few short runs is the rate the server can do.
fn runs_of(port: u16, n: u64, runs: usize) -> Vec<f64> {
    (0..runs).map(|_| bench(port, n)).collect()
}

fn best(runs: &[f64]) -> f64 {
    runs.iter().copied().fold(0.0, f64::max)
}

/// One capture with default flags (`scripts/wallclock -d SECS PID`),
/// benchmarked before, during (from the moment it says it is attached) and
/// after. Returns the share of the request rate it cost, and the spread of
/// the runs without the capture (1 - slowest / fastest): what the machine
/// alone moved the rate by.
fn capture_cost(redis: &Redis, n: u64, prefix: &Path) -> (f64, f64) {
    let before_runs = runs_of(redis.port, n, 3);
    let before = best(&before_runs);
    let mut wc = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["-d", "6", "--prefix", prefix.to_str().unwrap(), &redis.child.id().to_string()])
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The benchmark starts once the capture says it is attached.
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
    let t = Instant::now();
    let during = best(&runs_of(redis.port, n, 3));
    let measured = t.elapsed();
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let status = wc.wait().unwrap();
    log.push_str(&rest.join().unwrap());
    eprintln!("{log}");
    assert!(status.success(), "wallclock failed: {status}");
    let after_runs = runs_of(redis.port, n, 3);
    let after = best(&after_runs);
    let base = before.max(after);
    let loss = 1.0 - during / base;
    let slowest = before_runs.iter().chain(&after_runs).copied().fold(f64::MAX, f64::min);
    let spread = 1.0 - slowest / base;
    eprintln!(
        "redis GET rps (best of 3 runs each): before {before:.0}, during capture {during:.0} ({:.1} s), after {after:.0}: loss {:.1}%; runs without the capture {slowest:.0}..{base:.0} (spread {:.1}%)",
        measured.as_secs_f64(),
        100.0 * loss,
        100.0 * spread
    );
    (loss, spread)
}

#[test]
fn redis_server_with_default_flags() {
    if util::skip_without_root("server") {
        return;
    }
    let dir = util::scratch("server-redis");
    let redis = start_redis(&dir);
    let pid = redis.child.id();
    // Size the runs to about 1 s each on this machine: three fit in the
    // 6 s capture with room for a slow start.
    let rps = bench(redis.port, 20_000);
    let n = (rps as u64).max(10_000);
    let prefix = dir.join("redis");
    // A second capture only when the first went over: a real regression
    // goes over both times, a burst of load from beside the test does not.
    //
    // The budget holds on a quiet machine. On a busy one (two CPU hogs on
    // 2 CPUs) a 1-client loop's rate swings by itself from run to run
    // (8,000 to 36,000 requests a second here, no capture: every request
    // waits for a hog to be preempted), and so does libbpf-tools'
    // offcputime's cost beside it (17-75%): the check allows the budget
    // plus the spread the runs without the capture showed, a loss the
    // machine alone made. scripts/bench-capture compares the cost with
    // peers side by side.
    let (mut loss, mut spread) = capture_cost(&redis, n, &prefix);
    if loss > OVERHEAD_BUDGET + spread {
        eprintln!("over budget once; measuring again");
        let (l, s) = capture_cost(&redis, n, &prefix);
        if l - s < loss - spread {
            (loss, spread) = (l, s);
        }
    }
    assert!(
        loss <= OVERHEAD_BUDGET + spread,
        "the capture cost {:.1}% of the request rate (budget {:.0}%, plus {:.1}% the rate moved by itself without the capture)",
        100.0 * loss,
        100.0 * OVERHEAD_BUDGET,
        100.0 * spread
    );

    // Every thread's time is accounted for, and almost none of it without
    // the stack it was spent in.
    let report = Command::new(util::bin("wcreport")).arg("--json").arg(prefix.with_extension("stream")).output().unwrap();
    assert!(report.status.success());
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    let threads = report["threads"].as_array().unwrap();
    assert!(threads.iter().any(|t| t["tid"] == pid), "the main thread is in the report");
    for t in threads {
        let cov = t["coverage_pct"].as_f64().unwrap();
        assert!((cov - 100.0).abs() <= 5.0, "thread {} coverage {cov}%", t["tid"]);
        let stackless = t["short_blocks_ns"].as_u64().unwrap() + t["lost_stack_ns"].as_u64().unwrap();
        let pct = 100.0 * stackless as f64 / t["alive_ns"].as_u64().unwrap() as f64;
        assert!(pct <= 2.0, "thread {} ({}): {pct:.1}% of its time without a stack", t["tid"], t["comm"]);
    }

    // The event loop: the main thread's blocked time sits under redis's
    // own named functions (aeMain, the loop) and the epoll_wait it blocks
    // in. Its waits for a CPU are not all there: with CPU hogs beside it,
    // a request's handling preempted is runnable under that handling.
    let mdir = dir.join("multithread_redis");
    let main_folded = std::fs::read_dir(&mdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("thread_{pid}_")) && p.extension().is_some_and(|e| e == "folded"))
        .unwrap_or_else(|| panic!("no per-thread folded file for the main thread in {}", mdir.display()));
    let folded = std::fs::read_to_string(&main_folded).unwrap();
    let (mut off, mut in_loop) = (0u64, 0u64);
    for line in folded.lines() {
        let (stack, v) = line.rsplit_once(' ').unwrap();
        if !stack.ends_with("_[o]") || stack.ends_with(";[runnable]_[o]") {
            continue;
        }
        let v: u64 = v.parse().unwrap();
        off += v;
        let frames: Vec<&str> = stack.split(';').collect();
        if frames.contains(&"aeMain") && frames.iter().any(|f| f.starts_with("epoll_wait")) {
            in_loop += v;
        }
    }
    let share = in_loop as f64 / off.max(1) as f64;
    eprintln!("main thread: {:.0}% of {} ms blocked under aeMain -> epoll_wait", 100.0 * share, off / 1000);
    assert!(off > 1_000_000, "the main thread blocked for {off} us only");
    assert!(share >= 0.9, "only {:.0}% of the main thread's blocked time is under aeMain -> epoll_wait:\n{folded}", 100.0 * share);
}
