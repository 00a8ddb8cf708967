//! One window (issue 41): `wallclock -d 5` records 5 s, both captures the
//! same interval, and every output of the run spans that interval; a
//! launched command's capture ends with it. Before, oncputime attached
//! about 0.3 s before offcputime, each recorded its own -d, and the merged
//! window was their union: 5.24 s for -d 5, every thread's time 102.9% of
//! the 5 s asked, pprof's duration and the trace's tracks as long. Loads
//! BPF: run as root (skips otherwise).

mod util;

#[path = "wcexport/helpers.rs"]
#[allow(dead_code)]
mod helpers;

use std::collections::BTreeMap;
use std::io::{BufRead, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use wallclock_capture::target::monotonic_ns;

const MS: i64 = 1_000_000;

fn records(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// A thread's own CPU time over [start, end) from its readings (mono,
/// cpu), bounded by the readings around the window's edges: (at least,
/// at most); None when the readings do not reach past both edges (the
/// thread did not live through the window).
fn own_cpu(reads: &[(u64, u64)], start: u64, end: u64) -> Option<(u64, u64)> {
    let before = |t: u64| reads.iter().rev().find(|r| r.0 <= t).map(|r| r.1);
    let after = |t: u64| reads.iter().find(|r| r.0 >= t).map(|r| r.1);
    let (s0, s1, e0, e1) = (before(start)?, after(start)?, before(end)?, after(end)?);
    Some((e0.saturating_sub(s1), e1 - s0))
}

/// `wallclock --timeline -d 5 PID` on a program whose three threads read
/// their own clocks every millisecond (tests/programs/capture/ownclock.c):
/// the window, in the merged stream's header and in the report, is 5 s
/// within 20 ms; each thread's on- plus off-CPU time is 99-101% of it
/// (and of the 5 s asked), its on-CPU time what its own CPU clock counted
/// in the window; the pprof profile (wcexport --pprof, decoded by npm
/// pprof-format) and the trace (wcexport --trace) of the same run span
/// the same window, thread by thread.
#[test]
fn d5_is_five_seconds_everywhere() {
    if util::skip_without_root("onewindow") {
        return;
    }
    let dir = util::scratch("onewindow-d5");
    let bin = util::build_c("tests/programs/capture/ownclock.c", &dir, "ownclock");
    let mut prog = Command::new(&bin).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut ready = String::new();
    std::io::BufReader::new(prog.stderr.take().unwrap()).read_line(&mut ready).unwrap();
    assert_eq!(ready.trim(), "ready");
    let pid = prog.id().to_string();
    let prefix = dir.join("p");
    let out = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["--timeline", "-d", "5", "--prefix", prefix.to_str().unwrap(), &pid])
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .output()
        .unwrap();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(prog.id() as i32, libc::SIGTERM) };
    let mut own = String::new();
    prog.stdout.take().unwrap().read_to_string(&mut own).unwrap();
    prog.wait().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "wallclock failed: {err}");
    let own: Value = serde_json::from_str(&own).expect("the program's readings");

    // The window: the merged stream's header, and the report's.
    let recs = records(&dir.join("p.stream"));
    let h = &recs[0];
    let (start, end) = (h["start_ns"].as_u64().unwrap(), h["end_ns"].as_u64().unwrap());
    let window = end - start;
    eprintln!("-d 5: window {:.4} s", window as f64 / 1e9);
    assert!((window as i64 - 5000 * MS).abs() <= 20 * MS, "-d 5 recorded a window of {window} ns");
    let report = Command::new(util::bin("wcreport")).arg("--json").arg(dir.join("p.stream")).output().unwrap();
    assert!(report.status.success());
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(report["window"]["wall_ns"].as_u64(), Some(window), "the report's window: {}", report["window"]);

    // Each thread's time, in the stream and in the report.
    let mut time: BTreeMap<u64, u64> = BTreeMap::new();
    let mut on: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for r in recs.iter().filter(|r| r["type"] == "thread") {
        let tid = r["tid"].as_u64().unwrap();
        let off: u64 = r["off_ns"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        let (o, st) = (r["on_ns"].as_u64().unwrap(), r["steal_ns"].as_u64().unwrap_or(0));
        *time.entry(tid).or_default() += o + off;
        let e = on.entry(tid).or_default();
        (e.0, e.1) = (e.0 + o, e.1 + st);
    }
    assert_eq!(time.len(), 4, "the main thread and three workers: {time:?}");
    for (tid, &t) in &time {
        let (of_window, of_asked) = (100.0 * t as f64 / window as f64, 100.0 * t as f64 / 5e9);
        eprintln!("thread {tid}: {:.4} s, {of_window:.2}% of the window, {of_asked:.2}% of the 5 s asked", t as f64 / 1e9);
        assert!((99.0..=101.0).contains(&of_window) && (99.0..=101.0).contains(&of_asked), "thread {tid}: {t} ns in a window of {window} ns (-d 5)");
    }
    for t in report["threads"].as_array().unwrap() {
        let tid = t["tid"].as_u64().unwrap();
        assert_eq!(t["alive_ns"].as_u64(), Some(window), "thread {tid} in the report: {t}");
        assert_eq!(t["on_ns"].as_u64().unwrap() + t["off_total_ns"].as_u64().unwrap(), time[&tid], "thread {tid}: the report's time");
    }

    // Each worker's on-CPU time is what its own CPU clock counted in the
    // window (less steal, which the clock leaves out), to a tick of the
    // readings' staleness (see tests/activate.rs, nothing_before_activation).
    let tick = 10 * MS as u64;
    for t in own["threads"].as_array().unwrap() {
        let tid = t["tid"].as_u64().unwrap();
        let reads: Vec<(u64, u64)> =
            t["reads"].as_array().unwrap().iter().map(|r| (r[0].as_u64().unwrap(), r[1].as_u64().unwrap())).collect();
        let (lo, hi) = own_cpu(&reads, start, end).unwrap_or_else(|| panic!("thread {tid} ({}) did not read its clocks through the window", t["name"]));
        let (o, steal) = on[&tid];
        eprintln!("{}: on-CPU {:.1} ms (steal {:.1}), its own clock {:.1}..{:.1} ms", t["name"], o as f64 / 1e6, steal as f64 / 1e6, lo as f64 / 1e6, hi as f64 / 1e6);
        assert!(o + tick >= lo && o - steal.min(o) <= hi + tick, "{}: on-CPU {o} ns (steal {steal}), its own clock {lo}..{hi} ns", t["name"]);
    }

    // pprof: the window's length, and each thread's wall time as the
    // stream has it (its stacks' sum: the samples' shares of the exact
    // on-CPU time are rounded to the ns, stack by stack).
    let p = helpers::decode(&dir.join("p.pb.gz"));
    assert_eq!(p["durationNanos"].as_u64(), Some(window), "pprof durationNanos");
    let walls = helpers::wall_by_tid(&p);
    for (tid, &t) in &time {
        let w = walls.get(tid).copied().unwrap_or(0);
        assert!(w.abs_diff(t as i64) <= 1000, "pprof wall of thread {tid}: {w} ns, the stream's {t} ns");
    }

    // The trace: its window, and each thread's track tiles it.
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("p.trace.json")).unwrap()).unwrap();
    let meta = &trace["metadata"]["wallclock"];
    assert_eq!(meta["window_ns"].as_u64(), Some(window), "the trace's window: {meta}");
    assert_eq!(meta["start_ns"].as_u64(), Some(start), "the trace's start: {meta}");
    let mut tracks: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    for e in trace["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X") {
        let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap_or(0.0));
        let t = tracks.entry(e["tid"].as_u64().unwrap()).or_insert((f64::MAX, 0.0));
        (t.0, t.1) = (t.0.min(ts), t.1.max(ts + dur));
    }
    for tid in time.keys() {
        let &(a, b) = tracks.get(tid).unwrap_or_else(|| panic!("no track for thread {tid}"));
        let (from_ms, len_ms) = (a / 1e3, (b - a) / 1e3);
        eprintln!("trace track {tid}: from {from_ms:.3} ms, {len_ms:.3} ms long");
        assert!(from_ms.abs() <= 0.01 && (len_ms - window as f64 / 1e6).abs() <= 0.01, "thread {tid}'s track spans {from_ms}..{} ms of a {window} ns window", from_ms + len_ms);
    }
}

/// `wallclock -- CMD` ends with CMD: its capture's window closes, and
/// wallclock exits (its files written), within 1 s of the command's exit.
/// The command (tests/programs/capture/stamp.c) says when its main()
/// ended, on CLOCK_MONOTONIC.
#[test]
fn command_capture_ends_with_it() {
    if util::skip_without_root("onewindow") {
        return;
    }
    let dir = util::scratch("onewindow-cmd");
    let bin = util::build_c("tests/programs/capture/stamp.c", &dir, "stamp");
    let prefix = dir.join("c");
    let out = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["--prefix", prefix.to_str().unwrap(), "--", bin.to_str().unwrap(), "1"])
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .output()
        .unwrap();
    let exited = monotonic_ns();
    assert!(out.status.success(), "wallclock failed: {}", String::from_utf8_lossy(&out.stderr));
    let truth: Value = serde_json::from_slice(&out.stdout).expect("the command's stdout is its truth");
    let cmd_end = truth["end_ns"].as_u64().unwrap();
    let h = &records(&dir.join("c.stream"))[0];
    let (start, end) = (h["start_ns"].as_u64().unwrap(), h["end_ns"].as_u64().unwrap());
    let closed = end as i64 - cmd_end as i64;
    let after = Duration::from_nanos(exited - cmd_end);
    eprintln!("window {:.3} s; closed {:.1} ms after the command's end; wallclock exited {after:.3?} after it", (end - start) as f64 / 1e9, closed as f64 / 1e6);
    assert!((0..1000 * MS).contains(&closed), "the window closed {closed} ns after the command ended");
    assert!(after < Duration::from_secs(1), "wallclock exited {after:?} after its command");
}
