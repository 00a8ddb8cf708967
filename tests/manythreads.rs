//! offcputime on a process with 2,000 threads, most of them blocked and
//! waking at different periods, a few working (tests/programs/manythreads):
//! every thread is accounted (on + off = alive) and the burst of first
//! stacks (one per thread and blocking place) loses almost none of them.
//! Loads real BPF programs: run as root (skips, saying so, otherwise).

mod util;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const THREADS: usize = 2000;

fn program() -> PathBuf {
    let d = util::root().join("target/test-tmp/manythreads-bin");
    std::fs::create_dir_all(&d).unwrap();
    let out = d.join("manythreads");
    let st = Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls", "-pthread"])
        .arg(util::root().join("tests/programs/manythreads/manythreads.c"))
        .arg("-o")
        .arg(&out)
        .status()
        .expect("gcc");
    assert!(st.success(), "building manythreads failed");
    out
}

/// Killed when dropped, also when an assertion fails.
struct Target(Child);

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

#[test]
fn two_thousand_threads_accounted_with_their_stacks() {
    if !util::is_root() {
        eprintln!("SKIPPED: the manythreads test needs root (BPF)");
        return;
    }
    let d = util::scratch("manythreads");
    let mut child = Command::new(program()).args([&THREADS.to_string(), "120"]).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let target = Target(child);
    let pid = target.0.id();
    assert_eq!(line.trim(), format!("ready {pid}"), "manythreads did not start");
    let tids: BTreeSet<u64> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    assert_eq!(tids.len(), THREADS + 1);

    let out = d.join("off.jsonl");
    let t0 = Instant::now();
    let st = Command::new(util::bin("offcputime")).args(["-p", &pid.to_string(), "-d", "4", "-o"]).arg(&out).status().unwrap();
    let took = t0.elapsed();
    assert!(st.success(), "offcputime: {st}");
    drop(target);
    eprintln!("offcputime -d 4 on {THREADS} threads took {:.1} s", took.as_secs_f64());
    assert!(took < Duration::from_secs(14), "offcputime -d 4 took {took:?}");

    let text = std::fs::read_to_string(&out).unwrap();
    let recs: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let threads: Vec<&Value> = recs.iter().filter(|r| r["type"] == "thread").collect();
    let seen: BTreeSet<u64> = threads.iter().map(|t| u(&t["tid"])).collect();
    let missing: Vec<&u64> = tids.difference(&seen).collect();
    assert!(missing.is_empty(), "{} threads not in the stream, e.g. {:?}", missing.len(), &missing[..missing.len().min(5)]);

    // Every thread: on + off = alive, within 1%.
    let mut alive_total = 0u64;
    for t in &threads {
        let alive = u(&t["end_ns"]) - u(&t["start_ns"]);
        let acc = u(&t["on_ns"]) + ["R", "S", "D", "other"].iter().map(|s| u(&t["off_ns"][s])).sum::<u64>();
        let err = (acc as f64 - alive as f64).abs() / alive.max(1) as f64;
        assert!(err < 0.01, "thread {}: on+off {acc} vs alive {alive}", t["tid"]);
        alive_total += alive;
    }

    // Thread-time under [lost stack], and under a user stack.
    let (mut lost, mut with_ustack) = (0u64, 0u64);
    for s in recs.iter().filter(|r| r["type"] == "stack" && r["kind"] == "off") {
        if s["frames"][0]["func"] == "[lost stack]" {
            lost += u(&s["ns"]);
        }
        if s["ustack"].as_array().is_some_and(|a| !a.is_empty()) {
            with_ustack += u(&s["ns"]);
        }
    }
    let stats = &recs.last().unwrap()["counts"];
    let pct = |x: u64| x as f64 * 100.0 / alive_total as f64;
    eprintln!(
        "{} threads, {:.1} thread-s: [lost stack] {:.3}%, off-CPU under a user stack {:.2}%; stats {stats}",
        threads.len(),
        alive_total as f64 / 1e9,
        pct(lost),
        pct(with_ustack)
    );
    assert!(pct(lost) < 1.0, "{:.2}% of thread-time under [lost stack]", pct(lost));
    assert!(pct(with_ustack) > 95.0, "only {:.2}% of thread-time under a user stack", pct(with_ustack));
    assert_eq!(u(&stats["lost_stack_ns"]), lost, "the stats count what went to [lost stack]");
}
