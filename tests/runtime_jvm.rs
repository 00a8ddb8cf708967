//! A JVM program (OpenJDK 17, tests/programs/jvm/Main.java: a CPU loop that
//! measures its own CPU time, Thread.sleep, a contended synchronized,
//! write + fsync) profiled by `scripts/wallclock -- java ...` as a user
//! would start it, with no flag and then with -XX:+PreserveFramePointer.
//!
//! - No flag: the capture asks the running JVM for its JIT symbol map
//!   (tools/capture/src/jvm.rs), so Java methods are named; the compiled
//!   code keeps no frame pointers, so the CPU loop's stacks are cut there:
//!   they begin with stacksym's marker, and stderr and the report name
//!   the flag that gives whole stacks.
//! - With the flag: the methods named and the CPU loop's stacks whole,
//!   rooted at clone3/start_thread; its on-CPU time is the one it measured.
//!
//! One JVM launch per mode, 3 s each. Root (BPF) and java are needed; the
//! test skips, saying so, without them.

mod runtime_common;
mod util;

use std::process::Command;

use runtime_common::{have, profile, Run};
use serde_json::Value;

const SPIN: &str = "long Main.spin(long)";
const CUT: &str = "[stack cut in JIT code: java -XX:+PreserveFramePointer]";

/// Main.class built into `dir`.
fn build(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    let st = Command::new("javac")
        .arg("-d")
        .arg(dir)
        .arg(util::root().join("tests/programs/jvm/Main.java"))
        .status()
        .expect("javac");
    assert!(st.success(), "javac failed");
}

fn run(dir: &std::path::Path, flags: &[&str]) -> Run {
    let cp = dir.to_str().unwrap();
    let mut cmd = vec!["java"];
    cmd.extend_from_slice(flags);
    cmd.extend_from_slice(&["-cp", cp, "Main", "3", cp]);
    profile(&dir.join(if flags.is_empty() { "plain" } else { "fp" }), &cmd)
}

/// The spin thread's own measure of its CPU time.
fn spin_cpu_ns(r: &Run) -> u64 {
    r.stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["thread"] == "spin")
        .and_then(|v| v["cpu_ns"].as_u64())
        .unwrap_or_else(|| panic!("no spin line in the program's output: {}", r.stdout))
}

fn has(s: &runtime_common::Stack, f: &str) -> bool {
    s.frames.iter().any(|x| x == f)
}

#[test]
fn java_methods_named_without_flags_and_whole_stacks_with_preserve_frame_pointer() {
    if util::skip_without_root("JVM capture") || !have("java", "openjdk-17-jdk-headless") || !have("javac", "openjdk-17-jdk-headless") {
        return;
    }
    let dir = util::scratch("runtime_jvm");
    build(&dir);

    // No flag: named through the map the capture asked for; stacks cut,
    // and the user told the flag.
    let plain = run(&dir, &[]);
    let named_plain = plain.on_cpu_pct("spin", |s| has(s, SPIN));
    assert!(named_plain >= 50.0, "{named_plain:.1}% of the spin thread's on-CPU time names {SPIN}:\n{}", plain.top("spin"));
    let cut = plain.on_cpu_pct("spin", |s| s.frames.first().is_some_and(|f| f == CUT));
    assert!(cut >= 50.0, "{cut:.1}% of the spin thread's on-CPU time begins with {CUT}:\n{}", plain.top("spin"));
    assert!(plain.stderr.contains("start java with -XX:+PreserveFramePointer"), "stderr does not name the flag:\n{}", plain.stderr);
    assert!(plain.report.contains("start java with -XX:+PreserveFramePointer"), "the report does not name the flag");

    // The flag: whole stacks, named, and the time the thread measured.
    let fp = run(&dir, &["-XX:+PreserveFramePointer"]);
    let rooted = fp.on_cpu_pct("spin", |s| s.frames.first().is_some_and(|f| f == "clone3" || f == "start_thread"));
    assert!(rooted >= 90.0, "{rooted:.1}% of the spin thread's on-CPU time is rooted at clone3/start_thread:\n{}", fp.top("spin"));
    let named = fp.on_cpu_pct("spin", |s| has(s, SPIN));
    assert!(named >= 50.0, "{named:.1}% of the spin thread's on-CPU time names {SPIN}:\n{}", fp.top("spin"));
    assert!(!fp.report.contains("-XX:+PreserveFramePointer for whole stacks"), "the report asks for a flag the JVM has:\n{}", fp.report);
    let measured = spin_cpu_ns(&fp) as f64;
    let profiled: u64 = fp.on_cpu("spin").map(|s| s.ns).sum();
    let off = (profiled as f64 - measured).abs() / measured;
    assert!(off <= 0.10, "spin thread: on-CPU {profiled} ns in the profile, {measured} ns measured by the thread itself");
    // The lock's waiters wait in the JVM's monitor code under the Java
    // method that took the lock.
    let lock_off: Vec<&runtime_common::Stack> = fp
        .stacks
        .iter()
        .filter(|s| s.kind == "off" && fp.comms.get(&s.tid).is_some_and(|c| c.starts_with("lock-")))
        .collect();
    let all: u64 = lock_off.iter().map(|s| s.ns).sum();
    let in_lock: u64 = lock_off.iter().filter(|s| has(s, "void Main.lockLoop(long)")).map(|s| s.ns).sum();
    let under = in_lock as f64 * 100.0 / all.max(1) as f64;
    assert!(under >= 50.0, "{under:.1}% of the lock threads' off-CPU time is under Main.lockLoop");
    eprintln!("JVM: no flag: {named_plain:.1}% named, {cut:.1}% cut; flag: {rooted:.1}% rooted, {named:.1}% named; spin on-CPU {profiled} ns vs {measured} ns measured; lock waits under Main.lockLoop {under:.1}%");
}
