//! Erlang/OTP 25 (Debian's erlang-base; tests/programs/erlang/wc.erl:
//! `burn/2` computes in a process of its own, called by `burner/1`;
//! another process waits in `receive ... after`) profiled by
//! `scripts/wallclock -- erl ...`.
//!
//! - Without a flag: its functions named from the emulator's own code
//!   tables (the capture's beam reader), the callers from the Erlang
//!   process's stack, and no flag advised; BEAM's JIT code (in
//!   `/memfd:vmem`) is not taken for a binary to rebuild with -g.
//! - With `+JPperf true` the VM writes a perf map and keeps frame
//!   pointers: `$wc:burn/2` is named, under `$wc:burner/1`, in stacks
//!   that start at `[Erlang process stack]` (an Erlang process runs on a
//!   stack of its own: they end at its first function), and stderr says
//!   so rather than blame missing frame pointers.
//!
//! - Debian forky's OTP 29 (a stripped `beam.smp`, in
//!   target/chroot-forky as in a container), attached by host pid with no
//!   flag: its functions named from the emulator's own code tables, the
//!   callers from the Erlang process's stack, and no flag advised.
//! - Debian 12's OTP 25 attached before `wc` is loaded: its functions
//!   found at their frames, not taken for the last module's last one.
//!
//! Root (BPF) and erl/erlc are needed; the test skips, saying so, without them.

mod runtime_common;
mod util;

use runtime_common::{forky, have, profile, read_attached, run_attached, stats, Run};

fn run(name: &str, flags: &[&str]) -> Run {
    let dir = util::scratch(name);
    let src = util::root().join("tests/programs/erlang/wc.erl");
    let out = std::process::Command::new("erlc").arg("-o").arg(&dir).arg(&src).output().expect("run erlc");
    assert!(out.status.success(), "erlc failed: {}", String::from_utf8_lossy(&out.stderr));
    let mut cmd = vec!["erl"];
    cmd.extend_from_slice(flags);
    cmd.extend_from_slice(&["-noshell", "-pa", dir.to_str().unwrap(), "-s", "wc", "main", "2"]);
    profile(&dir, &cmd)
}

/// The checks of a run with no flag: `wc:burn/2` named in most of the
/// VM's on-CPU time, under `wc:burner/1` (or, skipped, its caller, as
/// with frame pointers: a sample between burn/2's tail calls), from
/// `[Erlang process stack]`, no flag advised; the figures, and the
/// reader's cost per stack (`beam_ns / beam_stacks`).
fn named_with_no_flag(run: &Run, what: &str, dir: &std::path::Path) -> String {
    let (pct, burn, under, skipped, rooted, top) = burn_figures(run);
    assert!(pct >= 50.0, "{what}: {pct:.1}% of the VM's on-CPU time names wc:burn/2:\n{top}\n{}", run.stderr);
    // A stale word of the process's stack can stand for a caller (0.5%
    // of burn/2's time under the other process's fun in one run); more
    // is a failure.
    let other = burn - under - skipped;
    assert!(other as f64 <= 0.02 * burn as f64, "{what}: {:.1}% of wc:burn/2's time is under neither wc:burner/1 nor its caller:\n{top}", other as f64 * 100.0 / burn as f64);
    assert!(under as f64 >= 0.8 * burn as f64, "{what}: wc:burn/2 is not under wc:burner/1:\n{top}");
    assert!(rooted as f64 >= 0.9 * burn as f64, "{what}: wc:burn/2's stacks do not start at [Erlang process stack]:\n{top}");
    assert!(!run.stderr.contains("JPperf") && !run.report.contains("JPperf"), "{what}: a flag is advised for what was read:\n{}\n{}", run.stderr, run.report);
    let st = stats(dir);
    let per = st.get("beam_ns").copied().unwrap_or(0) as f64 / st.get("beam_stacks").copied().unwrap_or(0).max(1) as f64 / 1000.0;
    format!(
        "{what}, no flag: {pct:.1}% of the VM's on-CPU time names wc:burn/2, {:.1}% of it under wc:burner/1, {:.1}% under neither, {:.1}% from [Erlang process stack]; reader {per:.1} us per stack",
        under as f64 * 100.0 / burn as f64,
        other as f64 * 100.0 / burn as f64,
        rooted as f64 * 100.0 / burn as f64
    )
}

/// What a run's on-CPU stacks give for `wc:burn/2`: its share of the VM's
/// on-CPU time, how much of it is under `wc:burner/1`, under burner's
/// caller (burner skipped, see below) and from `[Erlang process stack]`,
/// and the heaviest stacks for a message.
fn burn_figures(run: &Run) -> (f64, u64, u64, u64, u64, String) {
    let on: Vec<_> = run.stacks.iter().filter(|s| s.kind == "on").collect();
    let all: u64 = on.iter().map(|s| s.ns).sum();
    let burn: u64 = on.iter().filter(|s| s.frames.iter().any(|f| f.contains("wc:burn/2"))).map(|s| s.ns).sum();
    let top = {
        let mut v = on.clone();
        v.sort_by_key(|s| std::cmp::Reverse(s.ns));
        v.iter().take(5).map(|s| format!("{} {}\n", s.ns, s.frames.join(";"))).collect::<String>()
    };
    let under_pair = |a: &str| on.iter().filter(|s| s.frames.windows(2).any(|w| w[0].contains(a) && w[1].contains("wc:burn/2"))).map(|s| s.ns).sum::<u64>();
    let rooted: u64 = on
        .iter()
        .filter(|s| s.frames.iter().any(|f| f.contains("wc:burn/2")) && s.frames.first().is_some_and(|f| f == "[Erlang process stack]"))
        .map(|s| s.ns)
        .sum();
    let pct = burn as f64 * 100.0 / all.max(1) as f64;
    (pct, burn, under_pair("wc:burner/1"), under_pair("wc:'-main/1-fun-0-'/1"), rooted, top)
}

#[test]
fn erlang_named_with_jpperf_and_with_no_flag() {
    if util::skip_without_root("Erlang capture") || !have("erl", "erlang-base") || !have("erlc", "erlang-base") {
        return;
    }
    let plain = run("runtime_erlang_plain", &[]);
    assert!(!plain.report.contains("memfd:vmem: ") || !plain.report.contains("with -g"), "BEAM's JIT code is taken for a binary to rebuild:\n{}", plain.report);
    let fig = named_with_no_flag(&plain, "OTP 25 (Debian 12's, launched)", &util::root().join("target/test-tmp/runtime_erlang_plain"));
    eprintln!("erlang: {fig}");

    let perf = run("runtime_erlang_perf", &["+JPperf", "true"]);
    let on: Vec<_> = perf.stacks.iter().filter(|s| s.kind == "on").collect();
    let all: u64 = on.iter().map(|s| s.ns).sum();
    let burn: u64 = on.iter().filter(|s| s.frames.iter().any(|f| f.contains("wc:burn/2"))).map(|s| s.ns).sum();
    let top = {
        let mut v = on.clone();
        v.sort_by_key(|s| std::cmp::Reverse(s.ns));
        v.iter().take(5).map(|s| format!("{} {}\n", s.ns, s.frames.join(";"))).collect::<String>()
    };
    let pct = burn as f64 * 100.0 / all.max(1) as f64;
    assert!(pct >= 50.0, "{pct:.1}% of the VM's on-CPU time names wc:burn/2:\n{top}");
    let under: u64 = on
        .iter()
        .filter(|s| s.frames.windows(2).any(|w| w[0].contains("wc:burner/1") && w[1].contains("wc:burn/2")))
        .map(|s| s.ns)
        .sum();
    // burn/2 loops by tail calls, each leaving its frame and entering it
    // again: a sample taken in between (a few instructions) finds the
    // frame pointer still at burner/1's frame, whose return address is
    // burner's caller, so burner/1 alone is skipped (the frame-pointer
    // unwinder's limit at any function's entry; 2.7-6.8% of burn/2's time
    // in 9 runs, one beside two hogs, 10.1% in a fresh-clone run). Any other frame lost or
    // wrong is a failure: burn/2 sits under burner/1 or, skipped, its
    // caller, and most of its time under burner/1.
    let skipped: u64 = on
        .iter()
        .filter(|s| s.frames.windows(2).any(|w| w[0].contains("wc:'-main/1-fun-0-'/1") && w[1].contains("wc:burn/2")))
        .map(|s| s.ns)
        .sum();
    assert!(under + skipped == burn, "wc:burn/2 is under neither wc:burner/1 nor its caller:\n{top}");
    assert!(under as f64 >= 0.8 * burn as f64, "wc:burn/2 is not under wc:burner/1:\n{top}");
    // Whole as the Erlang process's stack is: from its first function,
    // marked as such, not as a stack cut for want of frame pointers.
    let rooted: u64 = on
        .iter()
        .filter(|s| s.frames.iter().any(|f| f.contains("wc:burn/2")) && s.frames.first().is_some_and(|f| f == "[Erlang process stack]"))
        .map(|s| s.ns)
        .sum();
    assert!(rooted as f64 >= 0.9 * burn as f64, "wc:burn/2's stacks do not start at [Erlang process stack]:\n{top}");
    assert!(perf.stderr.contains("Erlang process's first function"), "stderr does not say where the Erlang stacks end:\n{}", perf.stderr);
    assert!(!perf.report.contains("erl +JPperf true"), "the report asks for a flag the VM has:\n{}", perf.report);
    eprintln!("erlang: +JPperf true: {pct:.1}% of the VM's on-CPU time names wc:burn/2, {:.1}% of it under wc:burner/1", under as f64 * 100.0 / burn.max(1) as f64);
}

/// Debian forky's Erlang/OTP 29 (erlang-base; its beam.smp stripped, no
/// perf map: no flag) run in target/chroot-forky and attached by its host
/// pid: `wc:burn/2` named under `wc:burner/1` from the emulator's own
/// tables, its stacks whole from `[Erlang process stack]`, and neither
/// stderr nor the report asks for `+JPperf`.
#[test]
fn erlang_otp29_named_with_no_flag_attached_in_a_chroot() {
    use std::process::{Command, Stdio};
    if util::skip_without_root("Erlang capture") {
        return;
    }
    let Some(root) = forky("erl", "erlang-base") else { return };
    let dir = util::scratch("runtime_erlang_forky");
    let inside = "/tmp/wc-test-erlang-forky";
    let there = root.join(&inside[1..]);
    let _ = std::fs::remove_dir_all(&there);
    std::fs::create_dir_all(&there).unwrap();
    std::fs::copy(util::root().join("tests/programs/erlang/wc.erl"), there.join("wc.erl")).unwrap();
    let out = Command::new("chroot").arg(&root).args(["erlc", "-o", inside, &format!("{inside}/wc.erl")]).output().expect("run the chroot's erlc");
    assert!(out.status.success(), "erlc failed: {}", String::from_utf8_lossy(&out.stderr));
    // It outlives the capture (a capture tool can take seconds to load on
    // a loaded machine) and is stopped after it.
    let mut vm = Command::new(util::root().join("scripts/chroot"))
        .args(["run", "forky", "erl", "-noshell", "-pa", inside, "-s", "wc", "main", "60"])
        .stdout(Stdio::null())
        .spawn()
        .expect("start the chroot's erl");
    // Booted: its modules loaded, wc's processes running.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let cap = run_attached(&dir, vm.id(), 6);
    let _ = vm.kill();
    let _ = vm.wait();
    let _ = std::fs::remove_dir_all(&there);
    let run = read_attached(&dir, cap);
    let fig = named_with_no_flag(&run, "OTP 29 (forky's, attached)", &dir);
    eprintln!("erlang: {fig}");
}

/// Debian 12's OTP 25 attached by pid before the program's module is
/// loaded: the capture reads the VM's functions at its first stacks (the
/// schedulers' waits), and `wc` is loaded 5 s later, its code right after
/// the last module's, whose last function's end OTP 25 does not say.
/// `wc:burn/2` is named, from `[Erlang process stack]` under
/// `wc:burner/1`, as a function found at its frames
/// (`beam_late_functions`), not taken for that last function (one run in
/// five named the whole of burn/2's stacks
/// `inet_gethost_native:'-restart_port/1-inlined-0-'/1`).
#[test]
fn erlang_module_loaded_after_the_attach_named() {
    use std::process::{Command, Stdio};
    if util::skip_without_root("Erlang capture") || !have("erl", "erlang-base") || !have("erlc", "erlang-base") {
        return;
    }
    let dir = util::scratch("runtime_erlang_late");
    let src = util::root().join("tests/programs/erlang/wc.erl");
    let out = Command::new("erlc").arg("-o").arg(&dir).arg(&src).output().expect("run erlc");
    assert!(out.status.success(), "erlc failed: {}", String::from_utf8_lossy(&out.stderr));
    let mut vm = Command::new("erl")
        .args(["-noshell", "-pa", dir.to_str().unwrap(), "-eval", "timer:sleep(5000), wc:main(['5'])"])
        .stdout(Stdio::null())
        .spawn()
        .expect("start erl");
    std::thread::sleep(std::time::Duration::from_secs(1));
    let cap = run_attached(&dir, vm.id(), 8);
    let _ = vm.kill();
    let _ = vm.wait();
    let run = read_attached(&dir, cap);
    let fig = named_with_no_flag(&run, "OTP 25 (Debian 12's, attached before its module is loaded)", &dir);
    let late = stats(&dir).get("beam_late_functions").copied().unwrap_or(0);
    eprintln!("erlang: {fig}; {late} functions found at their frames");
}
