//! Ruby 3.1 (Debian's ruby; tests/programs/ruby/work.rb: two threads named
//! `worker-1` and `worker-2` run `work`, which calls `crunch` on the CPU,
//! `nap` in sleep and `with_lock` waiting for a Mutex a third thread holds,
//! each timed by the thread with CLOCK_MONOTONIC) profiled by
//! `scripts/wallclock -- ruby ...` with no flag:
//!
//! - each worker's stacks are whole (from `clone3`: its 1 MiB VM stack lies
//!   on its machine stack, past the 64K the capture copies, and used to cut
//!   98.6% of its time short at `[truncated]`);
//! - Ruby's methods are named with their callers (`rb::work` ->
//!   `rb::crunch`), C methods too (`rb::nap` -> `rb::sleep`), above the
//!   interpreter's `rb_vm_exec`;
//! - each method's share of the thread's time in `work` is within 5 points
//!   of the thread's own clocks;
//! - the threads are named as Ruby named them (`Thread#name=`);
//! - their waits for the GVL are under a `[GIL]` frame (as CPython's).
//!
//! Root (BPF) and ruby are needed; the test skips, saying so, without them.

mod runtime_common;
mod util;

use runtime_common::{have, profile, Run, Stack};
use serde_json::Value;

fn thread<'a>(r: &'a Run, name: &str) -> Vec<&'a Stack> {
    r.stacks
        .iter()
        .filter(|s| r.comms.get(&s.tid).is_some_and(|c| c == name))
        .filter(|s| !matches!(s.frames.first().map(String::as_str), Some("[steal]") | Some("[thread start]")))
        .collect()
}

fn ns(v: &[&Stack], pred: impl Fn(&Stack) -> bool) -> u64 {
    v.iter().filter(|s| pred(s)).map(|s| s.ns).sum()
}

fn top(v: &[&Stack], pred: impl Fn(&Stack) -> bool) -> String {
    let mut v: Vec<&&Stack> = v.iter().filter(|s| pred(s)).collect();
    v.sort_by_key(|s| std::cmp::Reverse(s.ns));
    v.iter().take(5).map(|s| format!("{} {} {}\n", s.kind, s.ns, s.frames.join(";"))).collect()
}

fn has(s: &Stack, f: &str) -> bool {
    s.frames.iter().any(|x| x == f)
}

/// `callee` right under `caller` (leafward), with nothing between.
fn called_by(s: &Stack, caller: &str, callee: &str) -> bool {
    s.frames.windows(2).any(|w| w[0] == caller && w[1] == callee)
}

#[test]
fn ruby_methods_named_with_their_callers_whole_and_timed_as_the_threads_time_them() {
    if util::skip_without_root("Ruby capture") || !have("ruby", "ruby") {
        return;
    }
    let prog = util::root().join("tests/programs/ruby/work.rb");
    let r = profile(&util::scratch("runtime_ruby"), &["ruby", prog.to_str().unwrap(), "3"]);
    let clocks: Value = r.stdout.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or_else(|| panic!("no clocks printed: {}", r.stdout));
    for name in ["worker-1", "worker-2"] {
        let t = thread(&r, name);
        let all = ns(&t, |_| true);
        assert!(all > 0, "no time in a thread named {name} (threads: {:?}):\n{}", r.comms, r.stderr);
        let whole = ns(&t, |s| s.frames.first().is_some_and(|f| f == "clone3"));
        let whole_pct = whole as f64 * 100.0 / all as f64;
        assert!(whole_pct >= 90.0, "{name}: {whole_pct:.1}% of its time in whole stacks:\n{}", top(&t, |s| s.frames.first().is_none_or(|f| f != "clone3")));
        let named = ns(&t, |s| has(s, "rb::work"));
        let named_pct = named as f64 * 100.0 / all as f64;
        assert!(named_pct >= 90.0, "{name}: {named_pct:.1}% of its time names rb::work:\n{}", top(&t, |s| !has(s, "rb::work")));
        // Ruby's frames go above the interpreter's loop that ran them.
        let above_vm = ns(&t, |s| s.frames.iter().position(|f| f == "rb_vm_exec") < s.frames.iter().position(|f| f == "rb::work"));
        assert!(above_vm as f64 >= 0.95 * named as f64, "{name}: rb::work not above rb_vm_exec:\n{}", top(&t, |_| true));
        let c = &clocks[name];
        let total = c["total"].as_f64().unwrap();
        for (f, callee) in [("crunch", None), ("nap", Some("rb::sleep")), ("with_lock", Some("rb::synchronize"))] {
            let rf = format!("rb::{f}");
            let seen = ns(&t, |s| has(s, &rf));
            let nested = ns(&t, |s| called_by(s, "rb::work", &rf));
            let share = seen as f64 * 100.0 / named as f64;
            let truth = c[f].as_f64().unwrap() * 100.0 / total;
            assert!((share - truth).abs() <= 5.0, "{name} {rf}: {share:.1}% of work's time in the profile, {truth:.1}% by the thread's clocks:\n{}", top(&t, |_| true));
            assert!(nested as f64 >= 0.95 * seen as f64, "{name}: {rf} not always under rb::work:\n{}", top(&t, |s| has(s, &rf)));
            if let Some(x) = callee {
                let through = ns(&t, |s| called_by(s, &rf, x));
                assert!(through as f64 >= 0.5 * seen as f64, "{name}: {rf} rarely calls {x}:\n{}", top(&t, |s| has(s, &rf)));
            }
            eprintln!("ruby {name}: {rf} {share:.1}% of work's time (thread's clocks: {truth:.1}%); {whole_pct:.1}% of the thread's time whole, {named_pct:.1}% under rb::work");
        }
        // Two threads computing at once on one GVL: each waits for it, and
        // that wait is its own frame, under the method that wanted the lock.
        let gvl = ns(&t, |s| s.kind == "off" && has(s, "[GIL]"));
        let gvl_under = ns(&t, |s| s.kind == "off" && s.frames.iter().position(|f| f == "[GIL]") > s.frames.iter().position(|f| f == "rb::work"));
        assert!(gvl > 0 && gvl_under as f64 >= 0.95 * gvl as f64, "{name}: {gvl} ns waiting for the GVL, {gvl_under} ns of it under rb::work:\n{}", top(&t, |s| has(s, "[GIL]")));
        eprintln!("ruby {name}: {:.1}% of its time waiting for the GVL ([GIL])", gvl as f64 * 100.0 / all as f64);
    }
}
