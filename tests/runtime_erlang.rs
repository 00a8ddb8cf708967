//! Erlang/OTP 25 (Debian's erlang-base; tests/programs/erlang/wc.erl:
//! `burn/2` computes in a process of its own, called by `burner/1`;
//! another process waits in `receive ... after`) profiled by
//! `scripts/wallclock -- erl ...`.
//!
//! - Without a flag: its functions named from the emulator's own code
//!   tables (the capture's beam reader), the callers from the Erlang
//!   process's stack, and no flag advised; BEAM's JIT code (in
//!   `/memfd:vmem`) is not taken for a binary to rebuild with -g, and no
//!   line is said about it. Each scheduler thread's time is at least 90%
//!   in whole stacks, and `burn/2`'s time is within 5 points of burner's
//!   own clock (its time in its calls of burn/2, of the program's run).
//! - With `+JPperf true` the VM writes a perf map and keeps frame
//!   pointers: `$wc:burn/2` is named, under `$wc:burner/1`, in stacks
//!   that start at `[Erlang process stack]` (an Erlang process runs on a
//!   stack of its own: they end at its first function), and stderr says
//!   so rather than blame missing frame pointers.
//!
//! - Debian forky's OTP 29 and trixie's OTP 27 (stripped `beam.smp`s, in
//!   target/chroot-forky and target/chroot-trixie as in a container),
//!   attached by host pid with no flag: the same checks as OTP 25's
//!   without a flag.
//! - Debian 12's OTP 25 attached before `wc` is loaded: its functions
//!   found at their frames, not taken for the last module's last one.
//!
//! Root (BPF) and erl/erlc are needed; the test skips, saying so, without
//! them; the chroots' tests fail without the chroot's erl (scripts/setup
//! --tests makes them) unless WALLCLOCK_SKIP_CHROOT=1 asks to skip.

mod runtime_common;
mod util;

use runtime_common::{attach_cmd_in_chroot, debian_chroot, forky, have, profile, read_attached, run_attached, stats, Run};

/// The tests here one at a time: each VM burns a CPU, and two beside
/// each other on this 2-CPU machine (with the capture tools) leave each
/// scheduler runnable a quarter of the time. Time a scheduler is
/// preempted in C code the JIT's shared code called (a BIF, the garbage
/// collector) is under `[BEAM JIT shared code]` without the Erlang
/// function that called it (its callers are on the Erlang process's
/// stack, which the reader walks only from an Erlang leaf): one such
/// preemption of 168 ms, with three VMs side by side, put `wc:burn/2`
/// 6 points under burner's own clock.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

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
/// `[Erlang process stack]`, no flag advised, each scheduler's time
/// whole (`schedulers_whole`); the figures, and the reader's cost per
/// stack (`beam_ns / beam_stacks`).
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
    let whole = schedulers_whole(run, what);
    let st = stats(dir);
    let per = st.get("beam_ns").copied().unwrap_or(0) as f64 / st.get("beam_stacks").copied().unwrap_or(0).max(1) as f64 / 1000.0;
    format!(
        "{what}, no flag: {pct:.1}% of the VM's on-CPU time names wc:burn/2, {:.1}% of it under wc:burner/1, {:.1}% under neither, {:.1}% from [Erlang process stack]; schedulers' time whole: {whole}; reader {per:.1} us per stack",
        under as f64 * 100.0 / burn as f64,
        other as f64 * 100.0 / burn as f64,
        rooted as f64 * 100.0 / burn as f64
    )
}

/// Of each scheduler thread's time (on and off CPU; the threads that run
/// Erlang code, `N_scheduler` before OTP 27, `erts_sched_N` from it), the
/// share in whole stacks, from `[Erlang process stack]` (an Erlang
/// process's first function, or the emulator's loop in the JIT's shared
/// code under which the scheduler waits) or the thread's first function:
/// at least 90% of each. The shares, for the figures.
fn schedulers_whole(run: &Run, what: &str) -> String {
    let roots = ["[Erlang process stack]", "clone3", "clone", "start_thread", "_start"];
    let mut tids: Vec<u64> = run.comms.iter().filter(|(_, c)| c.contains("sched")).map(|(t, _)| *t).collect();
    tids.sort_unstable();
    assert!(!tids.is_empty(), "{what}: no scheduler thread among {:?}", run.comms.values().collect::<Vec<_>>());
    let mut shares = Vec::new();
    for tid in tids {
        let all: u64 = run.stacks.iter().filter(|s| s.tid == tid).map(|s| s.ns).sum();
        let whole: u64 = run.stacks.iter().filter(|s| s.tid == tid && s.frames.first().is_some_and(|f| roots.contains(&f.as_str()))).map(|s| s.ns).sum();
        let pct = whole as f64 * 100.0 / all.max(1) as f64;
        let cut = {
            let mut v: Vec<_> = run.stacks.iter().filter(|s| s.tid == tid && !s.frames.first().is_some_and(|f| roots.contains(&f.as_str()))).collect();
            v.sort_by_key(|s| std::cmp::Reverse(s.ns));
            v.iter().take(5).map(|s| format!("{} {} {}\n", s.kind, s.ns, s.frames.join(";"))).collect::<String>()
        };
        assert!(pct >= 90.0, "{what}: {pct:.1}% of {}'s time in whole stacks; the heaviest others:\n{cut}", run.comms[&tid]);
        shares.push(format!("{} {pct:.1}%", run.comms[&tid]));
    }
    shares.join(", ")
}

/// No line about the files BEAM's JIT maps (`/memfd:vmem (deleted)`,
/// which has no ELF header): they are not files to read symbols from.
fn no_jit_file_noise(run: &Run, what: &str) {
    for l in run.stderr.lines().chain(run.report.lines()) {
        assert!(!l.contains("memfd") && !l.contains("(deleted)") && !l.contains("e_ident"), "{what}: a line about BEAM's JIT mapping: {l}\n{}", run.stderr);
    }
}

/// `wc:burn/2`'s time in the profile (its stacks on and off CPU: the
/// scheduler thread running it, also while it waits for a CPU) against
/// burner's own clock (`burn_us`), both as shares of the program's window
/// (`window_us`, from the GO file to burner's reply to stop, all inside the
/// capture): within 5 points.
fn burn_against_its_clock(run: &Run, what: &str) -> String {
    let clocks: serde_json::Value = run.stdout.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or_else(|| panic!("{what}: no clocks printed: {}", run.stdout));
    let (burn_us, window_us) = (clocks["burn_us"].as_f64().unwrap(), clocks["window_us"].as_f64().unwrap());
    let on: u64 = run.stacks.iter().filter(|s| s.kind == "on" && s.frames.iter().any(|f| f.contains("wc:burn/2"))).map(|s| s.ns).sum();
    let all: u64 = run.stacks.iter().filter(|s| s.frames.iter().any(|f| f.contains("wc:burn/2"))).map(|s| s.ns).sum();
    let truth = burn_us * 100.0 / window_us;
    let share = all as f64 / 10.0 / window_us;
    let by_kind = {
        let mut m: std::collections::BTreeMap<&str, u64> = Default::default();
        for s in run.stacks.iter().filter(|s| s.frames.iter().any(|f| f.contains("wc:burn/2"))) {
            *m.entry(s.kind.as_str()).or_default() += s.ns;
        }
        m
    };
    assert!((share - truth).abs() <= 5.0, "{what}: wc:burn/2 {share:.1}% of the program's {:.2} s in the profile, {truth:.1}% by burner's clock ({by_kind:?})", window_us / 1e6);
    format!("wc:burn/2 {share:.1}% of the program's {:.2} s ({:.1}% on CPU), burner's clock {truth:.1}%", window_us / 1e6, on as f64 / 10.0 / window_us)
}

/// What a run's on-CPU stacks give for `wc:burn/2`: its share of the VM's
/// on-CPU time, how much of it is under `wc:burner/1`, under burner's
/// caller (burner skipped, see below) and from `[Erlang process stack]`,
/// and the heaviest stacks for a message.
fn burn_figures(run: &Run) -> (f64, u64, u64, u64, u64, String) {
    let on: Vec<_> = run.stacks.iter().filter(|s| s.kind == "on" && !s.is_steal()).collect();
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
    let _one = one_at_a_time();
    let plain = run("runtime_erlang_plain", &[]);
    assert!(!plain.report.contains("memfd:vmem: ") || !plain.report.contains("with -g"), "BEAM's JIT code is taken for a binary to rebuild:\n{}", plain.report);
    no_jit_file_noise(&plain, "OTP 25 (Debian 12's, launched)");
    let fig = named_with_no_flag(&plain, "OTP 25 (Debian 12's, launched)", &util::root().join("target/test-tmp/runtime_erlang_plain"));
    let clock = burn_against_its_clock(&plain, "OTP 25 (Debian 12's, launched)");
    eprintln!("erlang: {fig}; {clock}");

    let perf = run("runtime_erlang_perf", &["+JPperf", "true"]);
    let on: Vec<_> = perf.stacks.iter().filter(|s| s.kind == "on" && !s.is_steal()).collect();
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
/// pid: see `attached_in_a_chroot`.
#[test]
fn erlang_otp29_named_with_no_flag_attached_in_a_chroot() {
    if util::skip_without_root("Erlang capture") {
        return;
    }
    let _one = one_at_a_time();
    let Some(root) = forky("erl", "erlang-base") else { return };
    attached_in_a_chroot("runtime_erlang_forky", &root, "OTP 29 (forky's, attached)");
}

/// Debian trixie's Erlang/OTP 27 (erlang-base 1:27.3.4.1; its beam.smp
/// stripped) run in target/chroot-trixie and attached by its host pid: see
/// `attached_in_a_chroot`.
#[test]
fn erlang_otp27_named_with_no_flag_attached_in_a_chroot() {
    if util::skip_without_root("Erlang capture") {
        return;
    }
    let _one = one_at_a_time();
    let Some(root) = debian_chroot("trixie", "erl", "erlang-base") else { return };
    attached_in_a_chroot("runtime_erlang_trixie", &root, "OTP 27 (trixie's, attached)");
}

/// The chroot's erl (no perf map: no flag) running wc for 5 s once the
/// capture is attached by its host pid: `wc:burn/2` named under
/// `wc:burner/1` from the emulator's own tables, its stacks whole from
/// `[Erlang process stack]`, its time within 5 points of burner's own
/// clock, neither stderr nor the report asks for `+JPperf`, and no line
/// about the files BEAM maps for its JIT (`/memfd:vmem`, deleted).
fn attached_in_a_chroot(name: &str, root: &std::path::Path, what: &str) {
    use std::process::Command;
    let run = attach_cmd_in_chroot(name, root, |there, inside| {
        std::fs::copy(util::root().join("tests/programs/erlang/wc.erl"), there.join("wc.erl")).unwrap();
        let out = Command::new("chroot").arg(root).args(["erlc", "-o", inside, &format!("{inside}/wc.erl")]).output().expect("run the chroot's erlc");
        assert!(out.status.success(), "erlc failed: {}", String::from_utf8_lossy(&out.stderr));
        ["erl", "-noshell", "-pa", inside, "-s", "wc", "main", "5", &format!("{inside}/go")].map(String::from).to_vec()
    });
    no_jit_file_noise(&run, what);
    let fig = named_with_no_flag(&run, what, &util::root().join("target/test-tmp").join(name));
    let clock = burn_against_its_clock(&run, what);
    eprintln!("erlang: {fig}; {clock}");
}

/// Debian 12's OTP 25 attached by pid before the program's module is
/// loaded: the capture reads the VM's functions at its first stacks (the
/// schedulers' waits), and `wc` is loaded 5 s later, its code right after
/// the last module's, whose last function's end OTP 25 does not say.
/// `wc:burn/2` is named, from `[Erlang process stack]` under
/// `wc:burner/1`, as a function found at its frames
/// (`beam_late_functions`), not taken for that last function (one run in
/// five named the whole of burn/2's stacks
/// `inet_gethost_native:'-restart_port/1-inlined-0-'/1`). A perf map an
/// earlier process left under the VM's pid is planted: not the VM's.
#[test]
fn erlang_module_loaded_after_the_attach_named() {
    use std::process::{Command, Stdio};
    if util::skip_without_root("Erlang capture") || !have("erl", "erlang-base") || !have("erlc", "erlang-base") {
        return;
    }
    let _one = one_at_a_time();
    let dir = util::scratch("runtime_erlang_late");
    let src = util::root().join("tests/programs/erlang/wc.erl");
    let out = Command::new("erlc").arg("-o").arg(&dir).arg(&src).output().expect("run erlc");
    assert!(out.status.success(), "erlc failed: {}", String::from_utf8_lossy(&out.stderr));
    let mut vm = Command::new("erl")
        .args(["-noshell", "-pa", dir.to_str().unwrap(), "-eval", "timer:sleep(5000), wc:main(['5'])"])
        .stdout(Stdio::null())
        .spawn()
        .expect("start erl");
    // Attached to the VM, not to erl's script or erlexec before it (a
    // loaded machine took more than the second this test waited).
    runtime_common::past_launchers(vm.id(), std::time::Duration::from_secs(4));
    // A perf map an earlier process with this pid left (pids wrap at
    // 32,768: a test run's build alone forks more) is not this VM's: taken
    // for its own, it kept the VM from the reader, with nothing said.
    let stale = std::path::PathBuf::from(format!("/tmp/perf-{}.map", vm.id()));
    let planted = std::fs::File::create_new(&stale).is_ok_and(|f| {
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::write(&stale, "1000 10 earlier\n").is_ok() && f.set_modified(hour_ago).is_ok()
    });
    std::thread::sleep(std::time::Duration::from_secs(1));
    let cap = run_attached(&dir, vm.id(), 8);
    let _ = vm.kill();
    let _ = vm.wait();
    if planted {
        std::fs::remove_file(&stale).ok();
    }
    let run = read_attached(&dir, cap);
    let fig = named_with_no_flag(&run, "OTP 25 (Debian 12's, attached before its module is loaded)", &dir);
    let late = stats(&dir).get("beam_late_functions").copied().unwrap_or(0);
    eprintln!("erlang: {fig}; {late} functions found at their frames");
}
