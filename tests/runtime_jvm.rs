//! A JVM program (OpenJDK 17, tests/programs/jvm/Main.java: a CPU loop that
//! measures its own CPU time, Thread.sleep, a contended synchronized,
//! write + fsync) profiled with no JVM flag, as a user would: launched by
//! `scripts/wallclock -- java ...`, then attached to by pid.
//!
//! The capture walks HotSpot's compiled, interpreted and stub frames from
//! the JVM's own metadata (tools/capture/src/runtimes/hotspot), so the stacks are
//! whole (rooted at clone3/start_thread) with each Java method named, as
//! the JVM names it (`long Main.spin(long)`), though compiled Java code
//! keeps no frame pointers. Ground truth: the spin thread's own CPU clock
//! (ThreadMXBean); the sleep and lock threads do nothing else.
//!
//! Then a Java HTTP server (tests/programs/jvm/Server.java,
//! com.sun.net.httpserver on a pool of threads) under wrk, attached by pid:
//! the pool threads' on-CPU time rooted at their start, under the handler.
//!
//! JDK 21 and 25 (Debian forky's, in target/chroot-forky as in a
//! container) attached by pid with no flag: the same checks.
//!
//! One 3 s launch and two 4 s attaches (and three more for 17, 21, 25). Root (BPF), java (and wrk for the
//! server) are needed; the tests skip, saying so, without them.

mod runtime_common;
mod util;

use std::process::{Command, Stdio};

use runtime_common::{have, profile, Run, Stack};
use serde_json::Value;

const SPIN: &str = "long Main.spin(long)";
const SPIN_LOOP: &str = "void Main.spinLoop(long)";
const SLEEP: &str = "void java.lang.Thread.sleep(long)";
const SLEEP_LOOP: &str = "void Main.sleepLoop(long)";
const LOCK_LOOP: &str = "void Main.lockLoop(long)";

/// `NAME.java` of tests/programs/jvm built into `dir`.
fn build(dir: &std::path::Path, name: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let st = Command::new("javac")
        .arg("-d")
        .arg(dir)
        .arg(util::root().join(format!("tests/programs/jvm/{name}.java")))
        .status()
        .expect("javac");
    assert!(st.success(), "javac failed");
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

fn has(s: &Stack, f: &str) -> bool {
    s.frames.iter().any(|x| x == f)
}

/// From a thread's start: `clone3`/`start_thread`, or in the chroot,
/// its stripped libc's (unnamed) first frame.
fn rooted(s: &Stack) -> bool {
    s.frames.first().is_some_and(|f| f == "clone3" || f == "start_thread" || f.starts_with("libc.so.6+0x"))
}

/// Of the time the threads whose name starts with `prefix` waited
/// (off-CPU, sleeping: not preempted) in stacks `which` picks, the
/// percentage in stacks for which `pred` holds, and the heaviest stacks.
fn waits_pct(r: &Run, prefix: &str, which: impl Fn(&Stack) -> bool, pred: impl Fn(&Stack) -> bool) -> (f64, String) {
    // The state leaf, followed by the wait's object when it has one
    // (`[sleep];[lock 0x7f..]`).
    let sleeping = |s: &Stack| {
        let funcs: Vec<&str> = s.frames.iter().map(String::as_str).collect();
        wallclock_stream::accounting::state_leaf_of(&funcs) == Some(wallclock_stream::State::S)
    };
    let waits = |s: &&Stack| s.kind == "off" && sleeping(s) && which(s);
    let mut off: Vec<&Stack> = r.stacks.iter().filter(|s| r.comms.get(&s.tid).is_some_and(|c| c.starts_with(prefix))).filter(waits).collect();
    let all: u64 = off.iter().map(|s| s.ns).sum();
    let yes: u64 = off.iter().filter(|s| pred(s)).map(|s| s.ns).sum();
    assert!(all > 0, "no wait of threads {prefix}*");
    // The heaviest waits that fail `pred`: what a failure is about.
    off.retain(|s| !pred(s));
    off.sort_by_key(|s| std::cmp::Reverse(s.ns));
    let top = off.iter().take(4).map(|s| format!("{} {}\n", s.ns, s.frames.join(";"))).collect();
    (yes as f64 * 100.0 / all as f64, top)
}

/// What both runs must show: a line of figures, and what failed.
fn check(r: &Run, how: &str, failed: &mut Vec<String>) -> String {
    let whole = r.on_cpu_pct("spin", |s| rooted(s) && has(s, SPIN));
    if whole < 90.0 {
        failed.push(format!("{how}: {whole:.1}% of the spin thread's on-CPU time is rooted at clone3/start_thread and names {SPIN}:\n{}", r.top("spin")));
    }
    // Which wait it is, the JVM's native frames say (the sleep, the
    // monitor); the Java frames above them are what is checked. The
    // threads' other waits (class loading for the line they print at
    // their end) are elsewhere, rightly.
    // JDK 25's Thread.sleep calls JVM_SleepNanos.
    let (sleep, top) = waits_pct(r, "sleep", |s| has(s, "JVM_Sleep") || has(s, "JVM_SleepNanos"), |s| rooted(s) && has(s, SLEEP) && has(s, SLEEP_LOOP));
    if sleep < 90.0 {
        failed.push(format!("{how}: {sleep:.1}% of the sleep thread's waits are under {SLEEP_LOOP} and {SLEEP}:\n{top}"));
    }
    // A monitor entered under contention; not `ObjectMonitor::wait`,
    // where a thread waits for a class another initialises (the format
    // of its last line: 10% of the lock threads' waits on a loaded
    // machine).
    let contended = |f: &String| f.starts_with("ObjectMonitor::") && !f.starts_with("ObjectMonitor::wait");
    let (lock, top) = waits_pct(r, "lock-", |s| s.frames.iter().any(contended), |s| rooted(s) && has(s, LOCK_LOOP));
    if lock < 90.0 {
        failed.push(format!("{how}: {lock:.1}% of the lock threads' waits are under {LOCK_LOOP}:\n{top}"));
    }
    if r.stderr.contains("layout tables") {
        failed.push(format!("{how}: the JVM's tables were not read:\n{}", r.stderr));
    }
    format!("{how}: spin {whole:.1}% whole and named, sleep {sleep:.1}%, lock {lock:.1}%")
}

#[test]
fn whole_java_stacks_without_flags_launched_and_attached() {
    if util::skip_without_root("JVM capture") || !have("java", "openjdk-17-jdk-headless") || !have("javac", "openjdk-17-jdk-headless") {
        return;
    }
    let dir = util::scratch("runtime_jvm");
    build(&dir, "Main");
    let cp = dir.to_str().unwrap();

    let mut failed = Vec::new();
    let launched = profile(&dir.join("launch"), &["java", "-cp", cp, "Main", "3", cp]);
    let fig = check(&launched, "launched", &mut failed);
    // The thread's clock covers its start and its loop, not the line it
    // formats after reading the clock.
    let measured = spin_cpu_ns(&launched) as f64;
    let profiled: u64 = launched.on_cpu("spin").filter(|s| has(s, SPIN_LOOP)).map(|s| s.ns).sum();
    let off = (profiled as f64 - measured).abs() / measured;
    if off > 0.05 {
        failed.push(format!("spin thread: on-CPU under {SPIN_LOOP} {profiled} ns in the profile, {measured} ns measured by the thread itself"));
    }

    // Attached by pid once its code is compiled: the JVM started before
    // the capture, with no flag.
    // Its run outlasts the capture: in a loaded machine a capture tool can
    // take seconds to load, and each counts -d from its own start.
    let mut java = Command::new("java").args(["-cp", cp, "Main", "20", cp]).stdout(Stdio::null()).spawn().expect("java");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let attached = attach(&dir.join("attach"), java.id());
    let _ = java.kill();
    let _ = java.wait();
    let fig_at = check(&attached, "attached", &mut failed);
    eprintln!("JVM, no flag: {fig}; spin on-CPU {profiled} ns vs {measured} ns measured ({:.1}%); {fig_at}", off * 100.0);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// JDK 21 and 25 (Debian forky's openjdk-21 and -25, run in
/// target/chroot-forky as in a container), attached by host pid with no
/// flag once Main's code is compiled (Main built by the host's javac 17):
/// the same checks as 17's, and the reader's cost per stack
/// (`hotspot_ns / hotspot_stacks`) beside 17's on the same program.
#[test]
fn jdk_21_and_25_in_a_chroot_attached_with_no_flag() {
    if util::skip_without_root("JVM capture") || !have("java", "openjdk-17-jdk-headless") || !have("javac", "openjdk-17-jdk-headless") {
        return;
    }
    let mut failed = Vec::new();
    let mut figs = Vec::new();
    let dir = util::scratch("runtime_jvm_versions");
    build(&dir, "Main");
    let cp = dir.to_str().unwrap();
    let mut java = Command::new("java").args(["-cp", cp, "Main", "20", cp]).stdout(Stdio::null()).spawn().expect("java");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let r = attach(&dir.join("attach17"), java.id());
    let _ = java.kill();
    let _ = java.wait();
    figs.push(format!("{}; {}", check(&r, "17 (Debian 12)", &mut failed), cost(&r)));
    for v in [21, 25] {
        let Some(root) = runtime_common::forky(&format!("../lib/jvm/java-{v}-openjdk-amd64/bin/java"), &format!("openjdk-{v}-jre-headless")) else { return };
        // Main's classes where the chroot's java sees them (and writes).
        let inside = format!("/tmp/wc-test-jvm{v}");
        let there = root.join(&inside[1..]);
        let _ = std::fs::remove_dir_all(&there);
        build(&there, "Main");
        let java_bin = format!("/usr/lib/jvm/java-{v}-openjdk-amd64/bin/java");
        let mut java = Command::new(util::root().join("scripts/chroot"))
            .args(["run", "forky", &java_bin, "-cp", &inside, "Main", "20", &inside])
            .stdout(Stdio::null())
            .spawn()
            .expect("java in the chroot");
        // The JVM's start in a chroot on a loaded machine, and its code compiled.
        std::thread::sleep(std::time::Duration::from_millis(2500));
        let r = attach(&dir.join(format!("attach{v}")), java.id());
        let _ = java.kill();
        let _ = java.wait();
        let _ = std::fs::remove_dir_all(&there);
        figs.push(format!("{}; {}", check(&r, &format!("{v} (Debian forky, in a chroot)"), &mut failed), cost(&r)));
    }
    eprintln!("JVMs attached with no flag:\n{}", figs.join("\n"));
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The JVM reader's cost per stack, from the report's stats.
fn cost(r: &Run) -> String {
    match (stat(&r.report, "hotspot_ns"), stat(&r.report, "hotspot_stacks")) {
        (Some(ns), Some(n)) if n > 0 => format!("reader {:.1} us per stack ({n} stacks)", ns as f64 / n as f64 / 1000.0),
        _ => "no hotspot_ns / hotspot_stacks in the report's stats".into(),
    }
}

/// `scripts/wallclock -f 199 -d 4 -o DIR/p PID`, read back.
fn attach(dir: &std::path::Path, pid: u32) -> Run {
    runtime_common::attach(dir, pid, 4)
}

#[test]
fn java_http_server_under_load_attached_by_pid() {
    if util::skip_without_root("JVM capture") || !have("java", "openjdk-17-jdk-headless") || !have("javac", "openjdk-17-jdk-headless") || !have("wrk", "wrk") {
        return;
    }
    let dir = util::scratch("runtime_jvm_server");
    build(&dir, "Server");
    let cp = dir.to_str().unwrap();
    let mut java = Command::new("java").args(["-cp", cp, "Server", "40"]).stdout(Stdio::piped()).spawn().expect("java");
    let mut port = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(java.stdout.take().unwrap()), &mut port).unwrap();
    let url = format!("http://127.0.0.1:{}/", port.trim());
    let mut wrk = Command::new("wrk").args(["-t2", "-c8", "-d30s", &url]).stdout(Stdio::null()).spawn().expect("wrk");
    // Its handler compiled, as a server that has run a while.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let r = attach(&dir.join("attach"), java.id());
    let _ = wrk.kill();
    let _ = java.kill();
    let _ = (wrk.wait(), java.wait());
    const HANDLE: &str = "void Server$Handler.handle(com.sun.net.httpserver.HttpExchange)";
    let whole = r.on_cpu_pct("pool", rooted);
    let handler = r.on_cpu_pct("pool", |s| rooted(s) && has(s, HANDLE));
    let compute = r.on_cpu_pct("pool", |s| has(s, "long Server$Handler.compute(long)"));
    eprintln!("JVM server, attached under wrk: pool threads' on-CPU time {whole:.1}% rooted at clone3/start_thread, {handler:.1}% of it also under {HANDLE}, {compute:.1}% in Handler.compute");
    assert!(whole >= 80.0, "{whole:.1}% of the pool threads' on-CPU time is rooted at clone3/start_thread:\n{}", r.top("pool"));
    // The handler named, where the pool spends its time (the rest: taking
    // the next exchange, reading and writing it).
    assert!(handler >= 50.0, "{handler:.1}% of the pool threads' on-CPU time is rooted and under {HANDLE}:\n{}", r.top("pool"));
    assert!(!r.stderr.contains("layout tables"), "the JVM's tables were not read:\n{}", r.stderr);
    // The reader's cost, as scripts/bench-runtimes reads it: its CPU time
    // and the stacks it walked, in the captures' stats (summed over both).
    let (ns, stacks) = (stat(&r.report, "hotspot_ns"), stat(&r.report, "hotspot_stacks"));
    eprintln!("JVM reader: {ns:?} ns of CPU over {stacks:?} stacks");
    let (Some(ns), Some(stacks)) = (ns, stacks) else { panic!("no hotspot_ns / hotspot_stacks in the report's stats:\n{}", r.report) };
    assert!(stacks > 0 && ns > 0, "the JVM reader counted {stacks} stacks, {ns} ns");
    // A stack costs tens of microseconds (a few reads a frame): a figure
    // past 10 ms a stack would be time not the reader's.
    assert!(ns / stacks < 10_000_000, "{} ns a stack", ns / stacks);
}

/// A counter of the report's `stats:` line (`key=N`).
fn stat(report: &str, key: &str) -> Option<u64> {
    let line = report.lines().find(|l| l.trim_start().starts_with("stats:"))?;
    line.split_whitespace().find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

