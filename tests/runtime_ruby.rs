//! Ruby 3.1 (Debian's ruby; tests/programs/ruby/work.rb: two threads named
//! `worker-1` and `worker-2` run `work`, which calls `crunch` on the CPU,
//! `nap` in sleep and `with_lock` waiting for a Mutex a third thread holds,
//! each timed by the thread with CLOCK_MONOTONIC) profiled by
//! `scripts/wallclock -- ruby ...` with no flag, and Ruby 3.2, 3.3 and
//! 3.4 (Ubuntu 24.04's ruby3.2 in target/chroot-noble; Debian forky's
//! ruby3.3 and experimental's ruby3.4 in target/chroot-forky; as in a
//! container) attached by pid with no flag:
//!
//! - each worker's stacks are whole (from `clone3`: 3.1's 1 MiB VM stack
//!   lies on its machine stack, past the 64K the capture copies, and used
//!   to cut 98.6% of its time short at `[truncated]`; in the chroot, from
//!   its stripped libc's unnamed `clone3`);
//! - Ruby's methods are named with their callers (`rb::work` ->
//!   `rb::crunch`), C methods too (`rb::nap` -> `rb::sleep`), above the
//!   interpreter's `rb_vm_exec` (3.3's is static: above a libruby frame);
//! - each method's share of the thread's time in `work` is within 5 points
//!   of the thread's own clocks;
//! - the threads are named as Ruby named them (`Thread#name=`);
//! - their waits for the GVL are under a `[GIL]` frame (as CPython's).
//!
//! And Ruby 3.3 built from source into its executable (no libruby), run
//! with YJIT, attached by pid with no flag: the same, through YJIT's code.
//!
//! Root (BPF) and ruby are needed; the test skips, saying so, without them.

mod runtime_common;
mod util;

use runtime_common::{attach_built, attach_in_chroot, debian_chroot, have, ns, profile, stats, top, Run, Stack};
use serde_json::Value;

fn thread<'a>(r: &'a Run, name: &str) -> Vec<&'a Stack> {
    r.stacks
        .iter()
        .filter(|s| r.comms.get(&s.tid).is_some_and(|c| c == name))
        .filter(|s| !matches!(s.frames.first().map(String::as_str), Some("[steal]") | Some("[thread start]")))
        .collect()
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
    check("ruby 3.1", &r, &util::root().join("target/test-tmp/runtime_ruby"), |s| s.frames.first().is_some_and(|f| f == "clone3"), |f| f == "rb_vm_exec");
}

/// Debian forky's Ruby 3.3 in a chroot, attached by pid with no flag: its
/// libruby exports neither `ruby_current_ec` nor `rb_vm_exec` (found in
/// the code of functions it exports), its control frames are 56 bytes,
/// its Strings and Arrays laid out anew; and the same checks as 3.1's.
#[test]
fn forkys_ruby_33_attached_with_no_flag() {
    // A thread's first frame is the chroot's stripped libc's (clone3).
    chroot_ruby("forky", "ruby3.3", "ruby3.3", "3.3", in_stripped_libc, |f| f.starts_with("libruby-3.3.so"));
}

/// Ruby 3.4 (Debian experimental's ruby3.4, installed in the forky
/// chroot), attached by pid with no flag: read with the layout of 3.4's
/// own headers (the same offsets as 3.3's for what is read), the same
/// checks as 3.1's.
#[test]
fn experimentals_ruby_34_attached_with_no_flag() {
    chroot_ruby("forky", "ruby3.4", "ruby3.4/experimental", "3.4", in_stripped_libc, |f| f.starts_with("libruby-3.4.so"));
}

/// Ubuntu 24.04's Ruby 3.2 (no Debian suite has 3.2) in
/// target/chroot-noble, attached by pid with no flag: 3.3's String and
/// iseq with 3.1's 64-byte control frame, the same checks as 3.1's.
#[test]
fn ubuntus_ruby_32_attached_with_no_flag() {
    let rooted = |s: &Stack| s.frames.first().is_some_and(|f| f.starts_with("libc.so.6+0x") || f == "clone3") && !s.frames.iter().any(|f| f == "[truncated]");
    chroot_ruby("noble", "ruby3.2", "ruby3.2", "3.2", rooted, |f| f == "rb_vm_exec");
}

/// Ruby 3.3 built from its source with Ruby's own defaults and YJIT (the
/// interpreter in the `ruby` executable, no libruby, as `./configure &&
/// make install` and ruby-build with `--disable-shared` build it; built by
/// scripts/build-ruby into target/ruby-yjit), run with YJIT on
/// (`RUBY_YJIT_ENABLE=1`, as Rails 7.2+ turns it on) and attached by pid
/// with no flag: its execution context found in the executable's own TLS,
/// the stacks walked through YJIT's code (no unwind table, no frame
/// pointer) whole, and the same checks as 3.1's; the methods YJIT compiled
/// run in it (`rb::[YJIT code]` under them).
#[test]
fn ruby_built_in_with_yjit_attached_with_no_flag() {
    if util::skip_without_root("Ruby capture") {
        return;
    }
    let built = attach_built("runtime_ruby_yjit", "target/ruby-yjit/bin/ruby", "build-ruby", "tests/programs/ruby/work.rb", "3", &[("RUBY_YJIT_ENABLE", "1")]);
    let Some((r, dir)) = built else { return };
    assert!(!r.stderr.contains("not walked") && !r.report.contains("not walked"), "{}\n{}", r.stderr, r.report);
    let rooted = |s: &Stack| s.frames.first().is_some_and(|f| f == "clone3") && !s.frames.iter().any(|f| f == "[truncated]");
    check("ruby 3.3 built in, YJIT", &r, &dir, rooted, |f| f == "rb_vm_exec" || f == "vm_exec_core");
    // YJIT ran the workers' methods (not all of crunch's time: its loop
    // leaves YJIT's code for the interpreter, a side exit, and the
    // method's frame stays interpreted to its return), and the stacks
    // through its code are whole.
    for name in ["worker-1", "worker-2"] {
        let t = thread(&r, name);
        let all = ns(&t, |_| true);
        let jit = ns(&t, |s| has(s, "rb::[YJIT code]"));
        let jit_whole = ns(&t, |s| has(s, "rb::[YJIT code]") && rooted(s));
        let pct = jit as f64 * 100.0 / all as f64;
        assert!(pct >= 10.0, "{name}: {pct:.1}% of its time in YJIT's code:\n{}", top(&t, |_| true));
        assert!(jit_whole as f64 >= 0.95 * jit as f64, "{name}: {jit_whole} of {jit} ns through YJIT's code whole:\n{}", top(&t, |s| has(s, "rb::[YJIT code]") && !rooted(s)));
        eprintln!("ruby 3.3 built in, YJIT {name}: {pct:.1}% of its time in YJIT's code, {:.1}% of that whole", jit_whole as f64 * 100.0 / jit as f64);
    }
}

/// A stack from the chroot's stripped libc's unnamed `clone3`, not cut.
fn in_stripped_libc(s: &Stack) -> bool {
    s.frames.first().is_some_and(|f| f.starts_with("libc.so.6+0x")) && !s.frames.iter().any(|f| f == "[truncated]")
}

/// `suite`'s chroot's `bin` (of `package`, Ruby `version`) running
/// work.rb, attached by its host pid: no "not walked", and `check`'s
/// checks with `rooted` and `vm`.
fn chroot_ruby(suite: &str, bin: &str, package: &str, version: &str, rooted: fn(&Stack) -> bool, vm: fn(&str) -> bool) {
    if util::skip_without_root("Ruby capture") {
        return;
    }
    let Some(root) = debian_chroot(suite, bin, package) else { return };
    let name = format!("runtime_ruby_{suite}_{}", version.replace('.', ""));
    let r = attach_in_chroot(&name, &root, bin, "tests/programs/ruby/work.rb", "3");
    assert!(!r.stderr.contains("not walked") && !r.report.contains("not walked"), "{}\n{}", r.stderr, r.report);
    check(&format!("ruby {version}"), &r, &util::root().join("target/test-tmp").join(&name), rooted, vm);
}

/// What every version must show (see the file's doc); `rooted`: a whole
/// stack; `vm`: the interpreter's frame the Ruby frames go above. Prints
/// the figures issue 40 measures: the process's thread-time in stacks
/// naming the program's methods, each worker's in whole stacks, and the
/// reader's cost per stack (`ruby_read_ns / ruby_stacks`).
fn check(label: &str, r: &Run, dir: &std::path::Path, rooted: impl Fn(&Stack) -> bool, vm: impl Fn(&str) -> bool) {
    let clocks: Value = r.stdout.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or_else(|| panic!("no clocks printed: {}", r.stdout));
    for name in ["worker-1", "worker-2"] {
        let t = thread(r, name);
        let all = ns(&t, |_| true);
        assert!(all > 0, "no time in a thread named {name} (threads: {:?}):\n{}", r.comms, r.stderr);
        let whole = ns(&t, |s| rooted(s));
        let whole_pct = whole as f64 * 100.0 / all as f64;
        assert!(whole_pct >= 90.0, "{label} {name}: {whole_pct:.1}% of its time in whole stacks:\n{}", top(&t, |s| !rooted(s)));
        let named = ns(&t, |s| has(s, "rb::work"));
        let named_pct = named as f64 * 100.0 / all as f64;
        assert!(named_pct >= 90.0, "{label} {name}: {named_pct:.1}% of its time names rb::work:\n{}", top(&t, |s| !has(s, "rb::work")));
        // Ruby's frames go above the interpreter's loop that ran them.
        let above_vm = ns(&t, |s| s.frames.iter().position(|f| f.starts_with("rb::")).is_some_and(|i| i > 0 && s.frames[..i].iter().any(|f| vm(f))));
        assert!(above_vm as f64 >= 0.95 * named as f64, "{label} {name}: Ruby frames not above the VM's loop:\n{}", top(&t, |_| true));
        let c = &clocks[name];
        let total = c["total"].as_f64().unwrap();
        for (f, callee) in [("crunch", None), ("nap", Some("rb::sleep")), ("with_lock", Some("rb::synchronize"))] {
            let rf = format!("rb::{f}");
            let seen = ns(&t, |s| has(s, &rf));
            let nested = ns(&t, |s| called_by(s, "rb::work", &rf));
            let share = seen as f64 * 100.0 / named as f64;
            let truth = c[f].as_f64().unwrap() * 100.0 / total;
            assert!((share - truth).abs() <= 5.0, "{label} {name} {rf}: {share:.1}% of work's time in the profile, {truth:.1}% by the thread's clocks:\n{}", top(&t, |_| true));
            assert!(nested as f64 >= 0.95 * seen as f64, "{label} {name}: {rf} not always under rb::work:\n{}", top(&t, |s| has(s, &rf)));
            if let Some(x) = callee {
                let through = ns(&t, |s| called_by(s, &rf, x));
                assert!(through as f64 >= 0.5 * seen as f64, "{label} {name}: {rf} rarely calls {x}:\n{}", top(&t, |s| has(s, &rf)));
            }
            eprintln!("{label} {name}: {rf} {share:.1}% of work's time (thread's clocks: {truth:.1}%); {whole_pct:.1}% of the thread's time whole, {named_pct:.1}% under rb::work");
        }
        // Two threads computing at once on one GVL: each waits for it, and
        // that wait is its own frame, under the method that wanted the lock.
        let gvl = ns(&t, |s| s.kind == "off" && has(s, "[GIL]"));
        let gvl_under = ns(&t, |s| s.kind == "off" && s.frames.iter().position(|f| f == "[GIL]") > s.frames.iter().position(|f| f == "rb::work"));
        assert!(gvl > 0 && gvl_under as f64 >= 0.95 * gvl as f64, "{label} {name}: {gvl} ns waiting for the GVL, {gvl_under} ns of it under rb::work:\n{}", top(&t, |s| has(s, "[GIL]")));
        eprintln!("{label} {name}: {:.1}% of its time waiting for the GVL ([GIL])", gvl as f64 * 100.0 / all as f64);
    }
    // Issue 40's figures: the process's thread-time in stacks naming Ruby
    // methods (the program's threads, `<main>` and its blocks included;
    // Ruby's own timer thread runs none), and the reader's cost per stack.
    let all: u64 = r.stacks.iter().map(|s| s.ns).sum();
    let named: u64 = r.stacks.iter().filter(|s| s.frames.iter().any(|f| f.starts_with("rb::") && !f.starts_with("rb::["))).map(|s| s.ns).sum();
    let st = stats(dir);
    let (rns, rst) = (st.get("ruby_read_ns").copied().unwrap_or(0), st.get("ruby_stacks").copied().unwrap_or(0));
    assert!(rst > 0, "{label}: no ruby_stacks in the capture's stats: {st:?}");
    eprintln!("{label}: {:.1}% of the process's thread-time names Ruby methods; reader {:.1} us per stack ({rst} stacks)", named as f64 * 100.0 / all.max(1) as f64, rns as f64 / rst as f64 / 1000.0);
}
