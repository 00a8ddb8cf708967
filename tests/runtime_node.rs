//! Node 20 profiled by `scripts/wallclock`, with no node flag: the
//! capture names JavaScript frames from V8's heap (tools/capture/src/runtimes/v8).
//!
//! - tests/programs/node/work.js (a hash loop on the main thread, run
//!   from a timer): hashLoop named, its stacks whole (from `_start`
//!   through `node::Start`: node's `main` tail-calls `node::Start` and
//!   leaves no frame), and no word about --perf-basic-prof.
//! - With --perf-basic-prof the names read from the heap are those V8
//!   wrote in its perf map (an independent reader of the same names), and
//!   the main thread's sleep in libuv's poll is whole, through `uv_run`.
//! - Stacks unwound after node exited (the capture stopped while node
//!   finishes: a capture lagging on a loaded machine) keep the names and
//!   tier markers read while it lived, all in V8's map.
//! - tests/programs/node/server.js (an HTTP server whose handler costs
//!   about 7 ms of CPU in the app's functions, loaded by client.js),
//!   launched and attached by pid: the app's functions named in >= 80%
//!   of the server's main thread's on-CPU time (launched: in its event
//!   loop, past node's startup), those stacks whole.
//!
//! Root (BPF) and node are needed; the test skips, saying so, without them.

mod runtime_common;
mod util;

use std::collections::HashSet;
use std::io::{BufRead, BufReader};

use std::process::{Command, Stdio};

use runtime_common::{have, profile, Run, Stack};
use serde_json::Value;

fn prog(name: &str) -> String {
    util::root().join("tests/programs/node").join(name).to_str().unwrap().to_string()
}

fn run(name: &str, flags: &[&str]) -> Run {
    let work = prog("work.js");
    let mut cmd = vec!["node"];
    cmd.extend_from_slice(flags);
    cmd.extend_from_slice(&[&work, "2"]);
    profile(&util::scratch(name), &cmd)
}

/// `scripts/wallclock -d SECS PID`, read back as `profile` reads a launch.
fn attach(name: &str, pid: u32, secs: u32) -> Run {
    runtime_common::attach(&util::scratch(name), pid, secs)
}

/// The on-CPU stacks of the main thread of `pid` (any node process when
/// None): its tid is its pid. Not its steal (see `Run::on_cpu`).
fn main_on_cpu(r: &Run, pid: Option<u64>) -> Vec<&Stack> {
    let node = |s: &Stack| r.comms.get(&s.tid).is_some_and(|c| c == "node");
    r.stacks.iter().filter(|s| s.kind == "on" && !s.is_steal() && s.tid == s.pid && pid.is_none_or(|p| s.pid == p) && node(s)).collect()
}

fn pct(v: &[&Stack], pred: impl Fn(&Stack) -> bool) -> f64 {
    let all: u64 = v.iter().map(|s| s.ns).sum();
    assert!(all > 0, "no time in the main thread's stacks");
    v.iter().filter(|s| pred(s)).map(|s| s.ns).sum::<u64>() as f64 * 100.0 / all as f64
}

fn top(v: &[&Stack]) -> String {
    let mut v = v.to_vec();
    v.sort_by_key(|s| std::cmp::Reverse(s.ns));
    v.iter().take(5).map(|s| format!("{} {}\n", s.ns, s.frames.join(";"))).collect()
}

/// From `_start` through `node::Start`: node's `main` is one instruction,
/// `jmp node::Start`, a tail call that leaves no frame.
fn whole(s: &Stack) -> bool {
    s.frames.first().is_some_and(|f| f == "_start") && s.frames.iter().any(|f| f.starts_with("node::Start("))
}

/// A JavaScript frame of `file`'s function `func`, as V8's perf map
/// names it: `JS:*func /path/file:LINE:COL` (`*` optimized, `^`
/// baseline, `~` interpreted).
fn js_frame(f: &str, func: &str, file: &str) -> bool {
    f.strip_prefix("JS:").is_some_and(|r| r.trim_start_matches(['*', '^', '~', '+']).starts_with(&format!("{func} ")) && r.contains(&format!("/{file}:")))
}

#[test]
fn node_js_named_with_no_flag() {
    if util::skip_without_root("Node capture") || !have("node", "nodejs") {
        return;
    }
    let plain = run("runtime_node_plain", &[]);
    let main = main_on_cpu(&plain, None);
    let named = pct(&main, |s| s.frames.iter().any(|f| js_frame(f, "hashLoop", "work.js")));
    assert!(named >= 60.0, "{named:.1}% of the main thread's on-CPU time names hashLoop:\n{}", top(&main));
    let js: Vec<&Stack> = main.iter().copied().filter(|s| s.frames.iter().any(|f| js_frame(f, "hashLoop", "work.js"))).collect();
    let whole_pct = pct(&js, whole);
    assert!(whole_pct >= 90.0, "{whole_pct:.1}% of the main thread's JavaScript stacks reach _start through node::Start:\n{}", top(&js));
    // Its caller, tick, is named too (interpreted or compiled).
    let tick = pct(&js, |s| s.frames.iter().any(|f| js_frame(f, "tick", "work.js")));
    assert!(tick >= 80.0, "{tick:.1}% of hashLoop's stacks name its caller tick:\n{}", top(&js));
    assert!(!plain.stderr.contains("--perf-basic-prof"), "stderr asks for a flag while the names were read:\n{}", plain.stderr);
    assert!(!plain.report.contains("--perf-basic-prof"), "the report asks for a flag while the names were read:\n{}", plain.report);
    eprintln!("node, no flag: {named:.1}% of the main thread's on-CPU time names hashLoop, {whole_pct:.1}% of those reach _start, {tick:.1}% name tick");
}

#[test]
fn node_names_agree_with_perf_basic_prof() {
    if util::skip_without_root("Node capture") || !have("node", "nodejs") {
        return;
    }
    let prof = run("runtime_node_prof", &["--perf-basic-prof"]);
    let main = main_on_cpu(&prof, None);
    let named = pct(&main, |s| s.frames.iter().any(|f| js_frame(f, "hashLoop", "work.js")));
    assert!(named >= 60.0, "{named:.1}% of the main thread's on-CPU time names hashLoop:\n{}", top(&main));
    // Every name of work.js's functions in the stacks (read from the
    // heap, or from the map) is one V8 wrote in its perf map.
    let pid = main[0].pid;
    let map_path = format!("/tmp/perf-{pid}.map");
    let map = std::fs::read_to_string(&map_path).unwrap_or_default();
    let _ = std::fs::remove_file(&map_path);
    let in_map: HashSet<&str> = map.lines().filter_map(|l| l.splitn(3, ' ').nth(2)).collect();
    assert!(in_map.iter().any(|n| n.contains("hashLoop")), "node wrote no perf map naming hashLoop at {map_path}");
    let ours: HashSet<&str> = prof.stacks.iter().flat_map(|s| &s.frames).map(String::as_str).filter(|f| f.starts_with("JS:") && f.contains("/work.js:")).collect();
    assert!(!ours.is_empty(), "no frame of work.js named");
    let missing: Vec<&&str> = ours.iter().filter(|n| !in_map.contains(**n)).collect();
    assert!(missing.is_empty(), "names not in V8's perf map: {missing:?}\nthe map's: {:?}", in_map.iter().filter(|n| n.contains("work.js")).collect::<Vec<_>>());
    let js: Vec<&Stack> = main.iter().copied().filter(|s| s.frames.iter().any(|f| js_frame(f, "hashLoop", "work.js"))).collect();
    let whole_pct = pct(&js, whole);
    assert!(whole_pct >= 90.0, "{whole_pct:.1}% of the main thread's JavaScript stacks reach _start through node::Start:\n{}", top(&js));
    // Between timers the main thread sleeps in libuv's poll: those stacks
    // are whole too, through uv_run (uv__io_poll's 15K frame fits the 64K
    // stack copy; the 16K copy of old stopped them at node::Start).
    let idle: Vec<&Stack> = prof.stacks.iter().filter(|s| s.kind == "off" && s.tid == s.pid && s.frames.iter().any(|f| f == "uv__io_poll")).collect();
    assert!(idle.iter().map(|s| s.ns).sum::<u64>() > 0, "the main thread never sleeps in uv__io_poll:\n{}", top(&main));
    let through_uv_run = |s: &Stack| s.frames.first().is_some_and(|f| f == "_start") && s.frames.iter().any(|f| f == "uv_run");
    let idle_whole = pct(&idle, through_uv_run);
    assert!(idle_whole >= 90.0, "{idle_whole:.1}% of the main thread's sleep in uv__io_poll reaches _start through uv_run:\n{}", top(&idle));
    assert!(!prof.stderr.contains("no /tmp/perf-"), "a perf map that exists is said to be missing:\n{}", prof.stderr);
    assert!(!prof.report.contains("--perf-basic-prof"), "the report asks for a flag node has");
    eprintln!("node --perf-basic-prof: {named:.1}% named hashLoop, {} names of work.js all in V8's map; {whole_pct:.1}% reach _start; {idle_whole:.1}% of the sleep in uv__io_poll through uv_run", ours.len());
}

/// A capture that lags behind its target (a loaded machine) unwinds its
/// last stacks after the process exited: their names are what was read
/// while it lived, tier markers included. Here the lag is made: oncputime
/// is stopped (SIGSTOP) while node finishes, its ring buffer holding the
/// last stacks, and continued once node is gone. Every name of work.js
/// must still be one V8 wrote in its perf map (a baseline `^tick` once
/// came out `*tick`: its bytecode slot's type was read from a process no
/// longer there).
#[test]
fn names_unwound_after_the_process_exited_keep_their_tier() {
    if util::skip_without_root("Node capture") || !have("node", "nodejs") {
        return;
    }
    let dir = util::scratch("runtime_node_gone");
    let out = dir.join("on.jsonl");
    let mut node = Command::new("node").args(["--perf-basic-prof", &prog("work.js"), "3"]).stdout(Stdio::null()).spawn().expect("run node");
    let pid = node.id();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let mut cap = Command::new(util::bin("oncputime")).args(["-F", "199", "-p", &pid.to_string(), "-o"]).arg(&out).stderr(Stdio::null()).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // SAFETY: kill(2) on our own child's pid, not yet waited for.
    let signal = |sig: i32| unsafe { libc::kill(cap.id() as libc::pid_t, sig) };
    signal(libc::SIGSTOP);
    node.wait().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    signal(libc::SIGCONT);
    std::thread::sleep(std::time::Duration::from_millis(1000));
    signal(libc::SIGINT);
    assert!(cap.wait().unwrap().success(), "oncputime -p {pid} failed");
    let map_path = format!("/tmp/perf-{pid}.map");
    let map = std::fs::read_to_string(&map_path).unwrap_or_default();
    let _ = std::fs::remove_file(&map_path);
    let in_map: HashSet<&str> = map.lines().filter_map(|l| l.splitn(3, ' ').nth(2)).collect();
    let o = Command::new(util::bin("stacksym")).arg(&out).stderr(Stdio::null()).output().unwrap();
    assert!(o.status.success(), "stacksym failed");
    let stream = util::resolved(&String::from_utf8_lossy(&o.stdout));
    let mut ours = HashSet::new();
    for r in stream.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).filter(|r| r["type"] == "stack") {
        for f in r["frames"].as_array().into_iter().flatten().filter_map(|f| f["func"].as_str()) {
            if f.starts_with("JS:") && f.contains("/work.js:") {
                ours.insert(f.to_string());
            }
        }
    }
    assert!(ours.iter().any(|f| js_frame(f, "tick", "work.js")), "tick never named: {ours:?}");
    let missing: Vec<&String> = ours.iter().filter(|n| !in_map.contains(n.as_str())).collect();
    assert!(missing.is_empty(), "names not in V8's perf map: {missing:?}\nthe map's: {:?}", in_map.iter().filter(|n| n.contains("work.js")).collect::<Vec<_>>());
}

const APP: [&str; 3] = ["handle", "renderPage", "mix"];

/// The server's app functions named in its main thread's on-CPU time
/// (`serving`: only in its event loop, past node's startup, whose CPU
/// time is fixed while a loaded machine gives the server less), and the
/// share of those stacks that are whole.
fn server_figures(r: &Run, pid: u64, how: &str, serving: bool) -> (f64, f64) {
    let in_loop = |s: &&Stack| !serving || s.frames.iter().any(|f| f.starts_with("node::SpinEventLoopInternal("));
    let main: Vec<&Stack> = main_on_cpu(r, Some(pid)).into_iter().filter(in_loop).collect();
    let app = |s: &Stack| s.frames.iter().any(|f| APP.iter().any(|a| js_frame(f, a, "server.js")));
    let named = pct(&main, app);
    assert!(named >= 80.0, "{how}: {named:.1}% of the server's main thread's on-CPU time names its app functions:\n{}", top(&main));
    let js: Vec<&Stack> = main.iter().copied().filter(|s| app(s)).collect();
    let whole_pct = pct(&js, whole);
    assert!(whole_pct >= 90.0, "{how}: {whole_pct:.1}% of the server's app stacks reach _start through node::Start:\n{}", top(&js));
    assert!(!r.stderr.contains("--perf-basic-prof"), "{how}: stderr asks for a flag while the names were read:\n{}", r.stderr);
    assert!(!r.report.contains("--perf-basic-prof"), "{how}: the report asks for a flag while the names were read");
    (named, whole_pct)
}

#[test]
fn node_http_server_named_launched_and_attached() {
    if util::skip_without_root("Node capture") || !have("node", "nodejs") {
        return;
    }
    // Launched: the server forks its own client and exits after 5 s.
    let server = prog("server.js");
    let launched = profile(&util::scratch("runtime_node_server_launched"), &["node", &server, "5"]);
    let done: Value = launched.stdout.lines().find_map(|l| serde_json::from_str(l).ok()).expect("the server's figures");
    let pid = done["pid"].as_u64().unwrap();
    assert!(done["served"].as_u64().unwrap() > 100, "the server served too little: {done}");
    let (l_named, l_whole) = server_figures(&launched, pid, "launched", true);
    let all = main_on_cpu(&launched, Some(pid));
    let app = |s: &Stack| s.frames.iter().any(|f| APP.iter().any(|a| js_frame(f, a, "server.js")));
    let l_all = pct(&all, app);

    // Attached by pid: a server already running and loaded.
    // It would serve 60 s: the capture's start on a loaded machine
    // takes seconds; it is stopped once the capture is done.
    let mut child = Command::new("node").args([&server, "60"]).stdout(Stdio::piped()).spawn().expect("start node");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let pid: u32 = first.split_whitespace().nth(2).and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no pid in {first:?}"));
    // Past its startup: what is attached to is a server at work.
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let attached = attach("runtime_node_server_attached", pid, 3);
    // SAFETY: kill(2) on the server this test started and has not reaped.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    let _ = child.wait();
    let (a_named, a_whole) = server_figures(&attached, u64::from(pid), "attached", false);
    eprintln!("node HTTP server, no flag: launched {l_named:.1}% of the main thread's on-CPU time in its event loop in named app functions ({l_whole:.1}% of those whole; {l_all:.1}% of all its on-CPU time, startup included); attached {a_named:.1}% of all its on-CPU time ({a_whole:.1}% whole)");
}
