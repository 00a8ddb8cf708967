//! Node 20 (tests/programs/node/work.js: a JavaScript hash loop on the
//! main thread, run from a timer) profiled by `scripts/wallclock -- node
//! ...` with and without --perf-basic-prof.
//!
//! - Without the flag V8's JIT code has no names: stderr and the report
//!   name the flag.
//! - With it, the JavaScript functions are named, the main thread's
//!   stacks through them are whole (from `_start` through `node::Start`:
//!   node's `main` tail-calls `node::Start` and leaves no frame), and the
//!   perf map, which exists, is never said to be missing.
//! - The main thread's sleep in libuv's poll between timers is in whole
//!   stacks too, through `uv_run`.
//!
//! Root (BPF) and node are needed; the test skips, saying so, without them.

mod runtime_common;
mod util;

use runtime_common::{have, profile, Run, Stack};

fn run(name: &str, flags: &[&str]) -> Run {
    let prog = util::root().join("tests/programs/node/work.js");
    let mut cmd = vec!["node"];
    cmd.extend_from_slice(flags);
    cmd.extend_from_slice(&[prog.to_str().unwrap(), "2"]);
    profile(&util::scratch(name), &cmd)
}

/// The main thread's on-CPU stacks (its tid is its pid).
fn main_on_cpu(r: &Run) -> Vec<&Stack> {
    r.stacks.iter().filter(|s| s.kind == "on" && s.tid == s.pid && r.comms.get(&s.tid).is_some_and(|c| c == "node")).collect()
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

#[test]
fn node_js_named_with_perf_basic_prof_and_told_the_flag_without() {
    if util::skip_without_root("Node capture") || !have("node", "nodejs") {
        return;
    }
    let plain = run("runtime_node_plain", &[]);
    assert!(plain.stderr.contains("start node with --perf-basic-prof"), "stderr does not name the flag:\n{}", plain.stderr);
    assert!(plain.report.contains("start node with --perf-basic-prof"), "the report does not name the flag");

    let prof = run("runtime_node_prof", &["--perf-basic-prof"]);
    let main = main_on_cpu(&prof);
    let is_js = |f: &String| f.starts_with("JS:") && f.contains("hashLoop");
    let named = pct(&main, |s| s.frames.iter().any(is_js));
    assert!(named >= 50.0, "{named:.1}% of the main thread's on-CPU time names hashLoop:\n{}", top(&main));
    let js: Vec<&Stack> = main.iter().copied().filter(|s| s.frames.iter().any(is_js)).collect();
    // node's `main` is one instruction, `jmp node::Start`: a tail call
    // that leaves no frame. A whole stack is _start's, through node::Start.
    let whole = pct(&js, |s| s.frames.first().is_some_and(|f| f == "_start") && s.frames.iter().any(|f| f.starts_with("node::Start(")));
    assert!(whole >= 90.0, "{whole:.1}% of the main thread's JavaScript stacks reach _start through node::Start:\n{}", top(&js));
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
    eprintln!("node: --perf-basic-prof: {named:.1}% of the main thread's on-CPU time in named JS, {whole:.1}% of those reach _start; {idle_whole:.1}% of its sleep in uv__io_poll reaches _start through uv_run");
}
