//! Tests of offcputime and oncputime against a workload that measures its
//! own per-function CPU and wall time (tests/programs/capture/workload.c).
//! They load real BPF programs: run as root (they fail otherwise, unless
//! WALLCLOCK_SKIP_ROOT=1 asks to skip).

mod util;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use util::truth::*;

use serde_json::Value;

const KERNEL_MIN: u64 = 0xffff_8000_0000_0000;

fn skip() -> bool {
    util::skip_without_root("capture")
}

/// Every thread's on + off time is its time alive in the window, within 2%.
fn check_accounting(recs: &[Value], with_off: bool) -> f64 {
    let mut worst = 0.0f64;
    for t in of_type(recs, "thread") {
        let alive = u(&t["end_ns"]) - u(&t["start_ns"]);
        let mut acc = u(&t["on_ns"]);
        if !with_off {
            continue;
        }
        for s in ["R", "S", "D", "other"] {
            acc += u(&t["off_ns"][s]);
        }
        let err = (acc as f64 - alive as f64).abs() / alive.max(1) as f64;
        worst = worst.max(err);
        assert!(err < 0.02, "thread {} ({}): on+off {acc} vs alive {alive} ({:.2}%)", t["tid"], t["comm"], err * 100.0);
    }
    worst
}

/// (thread, function, its workload-measured function -> share) pairs checked.
const CHECKED: &[(&str, &str)] = &[
    ("mixer", "compute"),
    ("mixer", "nap"),
    ("waiter", "wait_cond"),
    ("spin1", "spin"),
    ("spin2", "spin"),
    ("writer", "disk_write_fsync"),
    ("lock1", "mutex_section"),
    ("lock2", "mutex_section"),
    ("shorty", "short_wait"),
    ("shorty", "short_work"),
];

fn launch(name: &str, extra: &[&str], out: &Path, secs: &str) -> (Vec<Value>, Truth) {
    launch_env(name, extra, out, secs, &[])
}

fn launch_env(name: &str, extra: &[&str], out: &Path, secs: &str, env: &[(&str, &str)]) -> (Vec<Value>, Truth) {
    let wl = workload();
    let dir = util::root().join("target/test-tmp");
    let o = tool(name)
        .envs(env.iter().copied())
        .args(extra)
        .arg("-o")
        .arg(out)
        .arg("--")
        .arg(&wl)
        .arg(secs)
        .arg(&dir)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(o.status.success(), "{name} failed: {}", o.status);
    (records(out), truth(&o.stdout))
}

#[test]
fn offcputime_matches_ground_truth() {
    if skip() {
        return;
    }
    let d = util::scratch("capture-off-truth");
    let (recs, truth) = launch("offcputime", &[], &d.join("off.jsonl"), "3");
    let syms = Syms::new(&recs, &workload());
    let worst = check_accounting(&recs, true);
    eprintln!("offcputime: worst per-thread accounting error {:.3}%", worst * 100.0);
    for (tname, func) in CHECKED {
        let (tid, life, funcs) = &truth.threads[*tname];
        let (cpu, wall) = funcs[*func];
        let want = wall.saturating_sub(cpu) as f64 / *life as f64; // the two clocks are read apart: cpu may pass wall by µs
        let t = thread_rec(&recs, *tid);
        let alive = (u(&t["end_ns"]) - u(&t["start_ns"])) as f64;
        let mut got = 0u64;
        let mut direct = 0u64;
        let mut blocked = 0u64;
        for s in stacks_of(&recs, *tid) {
            let names = syms.funcs(&ustack(s));
            if names.iter().any(|n| n == func) {
                got += u(&s["ns"]);
            }
            if s["state"] != "R" && s["frames"].is_null() {
                blocked += u(&s["ns"]);
                // The caller of the libc function is the leaf-most workload frame.
                if names.last().map(String::as_str) == Some(*func) {
                    direct += u(&s["ns"]);
                }
                let k = s["kstack"].as_array().expect("kstack");
                assert!(!k.is_empty() && k.iter().all(|a| u(a) >= KERNEL_MIN), "kernel frames in kstack: {s}");
            }
        }
        let got = got as f64 / alive;
        eprintln!("offcputime {tname:7} {func:17} off-CPU share: tool {:.2}% truth {:.2}% (err {:+.2} pp)", got * 100.0, want * 100.0, (got - want) * 100.0);
        // Steal (the hypervisor's time on the thread's vCPU) is not on the
        // truth's CPU clock, so the truth counts it off-CPU; the tool shows
        // it apart, as the thread's [steal]: off-CPU may fall short by it.
        let stolen = u(&t["steal_ns"]) as f64 / alive;
        assert!(want - got < 0.03 + stolen && got - want < 0.03, "{tname}/{func}: off-CPU share {got:.4} vs truth {want:.4} (steal {stolen:.4})");
        // The CPU time the tool measured (on-CPU less steal) is the thread's own CPU clock.
        let thread_cpu: u64 = funcs.values().map(|f| f.0).sum();
        let ran = (u(&t["on_ns"]) - u(&t["steal_ns"])) as f64;
        let d = (ran - thread_cpu as f64) / alive;
        eprintln!("offcputime {tname:7} on-CPU less steal {:.1} ms, CPU clock {:.1} ms, steal {:.1} ms", ran / 1e6, thread_cpu as f64 / 1e6, u(&t["steal_ns"]) as f64 / 1e6);
        assert!(d.abs() < 0.02, "{tname}: on_ns - steal_ns {ran} vs CPU clock {thread_cpu}");
        if !matches!(*func, "compute" | "spin" | "short_work") {
            let frac = direct as f64 / blocked.max(1) as f64;
            eprintln!("offcputime {tname:7} {func:17} caller directly above libc in {:.1}% of blocked time", frac * 100.0);
            assert!(frac > 0.95, "{tname}: {func} is the caller in only {:.1}% of blocked time", frac * 100.0);
        }
    }
    check_short_blocks_keep_stacks(&recs, &truth, &syms);
    // The pinned spinners wait for the CPU: runnable time, under spin().
    for tname in ["spin1", "spin2"] {
        let (tid, ..) = truth.threads[tname];
        let t = thread_rec(&recs, tid);
        let alive = (u(&t["end_ns"]) - u(&t["start_ns"])) as f64;
        let r = u(&t["off_ns"]["R"]) as f64;
        assert!(r / alive > 0.3, "{tname}: runnable only {:.1}%", r / alive * 100.0);
        let under_spin: u64 = stacks_of(&recs, tid)
            .iter()
            .filter(|s| s["state"] == "R" && syms.funcs(&ustack(s)).iter().any(|n| n == "spin"))
            .map(|s| u(&s["ns"]))
            .sum();
        assert!(under_spin as f64 > 0.9 * r, "{tname}: {under_spin} of {r} runnable ns under spin");
    }
}

/// Off-CPU time of a thread under a stack without frames to show: a
/// synthetic one (`[lost stack]`, `[filtered: ...]`, `[short blocks]`...).
fn stackless_ns(recs: &[Value], tid: u64) -> u64 {
    stacks_of(recs, tid)
        .iter()
        .filter(|s| s["kind"] == "off" && s["frames"].as_array().is_some_and(|f| f.iter().any(|f| f["func"].as_str().is_some_and(|n| n.starts_with('[')))))
        .map(|s| u(&s["ns"]))
        .sum()
}

/// With default flags, sub-millisecond blocks keep their stacks: shorty's
/// short_wait (blocks of ~200 µs, over 30% of its time) is under its own
/// stack, and no thread has more than 2% of its time in a stack-less bucket.
fn check_short_blocks_keep_stacks(recs: &[Value], truth: &Truth, syms: &Syms) {
    let (tid, life, funcs) = &truth.threads["shorty"];
    let (cpu, wall) = funcs["short_wait"];
    let share = (wall - cpu) as f64 / *life as f64;
    assert!(share > 0.30, "the workload's short_wait is only {:.1}% of its thread's time", share * 100.0);
    let (mut ns, mut count) = (0, 0);
    for s in stacks_of(recs, *tid).iter().filter(|s| s["state"] == "S" && syms.funcs(&ustack(s)).iter().any(|n| n == "short_wait")) {
        ns += u(&s["ns"]);
        count += u(&s["count"]);
    }
    let mean = ns / count.max(1);
    eprintln!("offcputime shorty: {count} sleeping blocks under short_wait, {mean} ns each on average");
    assert!(count > 100 && mean < 1_000_000, "short_wait: {count} blocks, mean {mean} ns: not sub-millisecond blocks");
    for t in of_type(recs, "thread") {
        let alive = u(&t["end_ns"]) - u(&t["start_ns"]);
        let lost = stackless_ns(recs, u(&t["tid"]));
        eprintln!("offcputime thread {} ({}): {:.3}% of its time without a stack", t["tid"], t["comm"], lost as f64 * 100.0 / alive as f64);
        assert!(lost * 50 <= alive, "thread {} ({}): {lost} of {alive} ns in stack-less buckets", t["tid"], t["comm"]);
    }
}

/// `-M` and `--state` are filters: the time they leave out stays in the
/// thread's totals under `[filtered: over -M]` / `[filtered: --state]`,
/// counted in the stats; `-m` only counts the short blocks (per state).
#[test]
fn filters_keep_time_under_named_stacks() {
    if skip() {
        return;
    }
    let d = util::scratch("capture-filters");
    let (recs, truth) = launch("offcputime", &["-m", "1000", "-M", "5000", "--state", "1"], &d.join("off.jsonl"), "2");
    check_accounting(&recs, true);
    let syms = Syms::new(&recs, &workload());
    let under = |tid: u64, name: &str| -> u64 {
        stacks_of(&recs, tid).iter().filter(|s| s["frames"][0]["func"] == name).map(|s| u(&s["ns"])).sum()
    };
    // The sleeper's one block (2 s) is over -M.
    let (tid, ..) = truth.threads["sleeper"];
    let t = thread_rec(&recs, tid);
    let alive = u(&t["end_ns"]) - u(&t["start_ns"]);
    let over = under(tid, "[filtered: over -M]");
    eprintln!("filters: sleeper {:.1}% under [filtered: over -M]", over as f64 * 100.0 / alive as f64);
    assert!(over as f64 > 0.95 * alive as f64, "sleeper: {over} of {alive} ns under [filtered: over -M]");
    // The spinners' runnable time is not in state 1 (sleep): all of it
    // filtered, by --state, or by -M first when the wait was over 5 ms.
    let (tid, ..) = truth.threads["spin1"];
    let r = u(&thread_rec(&recs, tid)["off_ns"]["R"]);
    let filt = under(tid, "[filtered: --state]");
    let r_over: u64 = stacks_of(&recs, tid).iter().filter(|s| s["state"] == "R" && s["frames"][0]["func"] == "[filtered: over -M]").map(|s| u(&s["ns"])).sum();
    eprintln!("filters: spin1 runnable {r} ns, {filt} under [filtered: --state], {r_over} under [filtered: over -M]");
    assert!(filt > 0 && (filt + r_over) as f64 > 0.99 * r as f64, "spin1: {filt} + {r_over} of {r} runnable ns filtered");
    // Short sleeping blocks keep their stacks, and the stats say how much
    // time was in blocks under -m.
    let (tid, _, funcs) = &truth.threads["shorty"];
    let kept: u64 = stacks_of(&recs, *tid)
        .iter()
        .filter(|s| s["state"] == "S" && syms.funcs(&ustack(s)).iter().any(|n| n == "short_wait"))
        .map(|s| u(&s["ns"]))
        .sum();
    let (cpu, wall) = funcs["short_wait"];
    assert!(kept as f64 > 0.8 * (wall - cpu) as f64, "short_wait: {kept} ns kept of {} off-CPU", wall - cpu);
    let stats = &of_type(&recs, "stats")[0]["counts"];
    eprintln!("filters: stats {stats}");
    assert!(u(&stats["over_max_blocks"]) > 0 && u(&stats["state_filtered_blocks"]) > 0, "{stats}");
    assert!(u(&stats["short_blocks_ns_S"]) as f64 > 0.8 * kept as f64, "short_blocks_ns_S {} vs short_wait {kept}", stats["short_blocks_ns_S"]);
    assert_eq!(u(&stats["short_blocks_ns"]), ["R", "S", "D", "other"].iter().map(|s| u(&stats[format!("short_blocks_ns_{s}")])).sum::<u64>());
    assert_eq!(u(&recs[0]["min_block_ns"]), 1_000_000);
}

/// The raw_tp program (chosen when tp_btf cannot load) accounts the same.
#[test]
fn raw_tp_fallback_accounts_the_same() {
    if skip() {
        return;
    }
    let d = util::scratch("capture-raw-tp");
    let (recs, truth) =
        launch_env("offcputime", &[], &d.join("off.jsonl"), "2", &[("WALLCLOCK_FORCE_RAW_TP", "1")]);
    check_accounting(&recs, true);
    let syms = Syms::new(&recs, &workload());
    let (tid, life, funcs) = &truth.threads["mixer"];
    let (cpu, wall) = funcs["nap"];
    let want = wall.saturating_sub(cpu) as f64 / *life as f64; // the two clocks are read apart: cpu may pass wall by µs
    let t = thread_rec(&recs, *tid);
    let alive = (u(&t["end_ns"]) - u(&t["start_ns"])) as f64;
    let got: u64 = stacks_of(&recs, *tid)
        .iter()
        .filter(|s| syms.funcs(&ustack(s)).last().map(String::as_str) == Some("nap"))
        .map(|s| u(&s["ns"]))
        .sum();
    let got = got as f64 / alive;
    eprintln!("raw_tp: mixer nap off-CPU share tool {:.2}% truth {:.2}%", got * 100.0, want * 100.0);
    assert!((got - want).abs() < 0.03, "raw_tp: nap share {got:.4} vs {want:.4}");
}

#[test]
fn oncputime_matches_ground_truth() {
    if skip() {
        return;
    }
    let d = util::scratch("capture-on-truth");
    let (recs, truth) = launch("oncputime", &["--exact", "-F", "999"], &d.join("on.jsonl"), "3");
    // On a VM, time the hypervisor takes from a running vCPU ("steal") is
    // on-CPU for the scheduler but not on CLOCK_THREAD_CPUTIME_ID, the
    // workload's truth. The tool measures it per thread (steal_ns, a
    // [steal] stack) and scales the samples to the rest: the function
    // shares must match the CPU clock however much was stolen.
    let syms = Syms::new(&recs, &workload());
    let hdr = &recs[0];
    assert_eq!(hdr["tool"], "oncputime");
    assert_eq!(u(&hdr["freq_hz"]), 999);
    let mut shorty = Vec::new();
    for (tname, func) in CHECKED {
        let (tid, life, funcs) = &truth.threads[*tname];
        let (cpu, _) = funcs[*func];
        let want = cpu as f64 / *life as f64;
        let t = thread_rec(&recs, *tid);
        let alive = (u(&t["end_ns"]) - u(&t["start_ns"])) as f64;
        let got: u64 = stacks_of(&recs, *tid)
            .iter()
            .filter(|s| syms.funcs(&ustack(s)).iter().any(|n| n == func))
            .map(|s| u(&s["ns"]))
            .sum();
        let got = got as f64 / alive;
        eprintln!("oncputime  {tname:7} {func:17} on-CPU share: tool {:.2}% truth {:.2}% (err {:+.2} pp)", got * 100.0, want * 100.0, (got - want) * 100.0);
        if *tname == "shorty" {
            // A timer sample cannot land while interrupts are off: in the
            // switch path (runqueue lock, the hrtimer programmed for the
            // timeout, a VM exit on this VM). short_wait's CPU comes in
            // µs slices that are mostly that path, so sampling sees less
            // of it than the thread's clock does and gives the rest to
            // short_work, the thread's only other code (perf's cpu-clock
            // has the same blind spot; docs/tools.md, "On-CPU samples"). Measured
            // on these VMs, idle and under CI's load: short_wait seen at
            // 34-62% of its CPU time in eleven runs of one session, 15-42%
            // in the next (CI's run at 15.6%). What must hold: short_wait is
            // seen, samples only move between the two (their sum is exact,
            // below), and short_work is never shown short.
            shorty.push((got, want));
            let (lo, hi) = if *func == "short_wait" { (want * 0.1, want + 0.03) } else { (want - 0.03, 1.0) };
            assert!(got > lo && got < hi, "{tname}/{func}: on-CPU share {got:.4} vs truth {want:.4} (allowed {lo:.4}..{hi:.4})");
        } else {
            assert!((got - want).abs() < 0.03, "{tname}/{func}: on-CPU share {got:.4} vs truth {want:.4}");
        }
        // Exact on-CPU time less steal, per thread, is the thread's own clock.
        let thread_cpu: u64 = funcs.values().map(|f| f.0).sum();
        let ran = (u(&t["on_ns"]) - u(&t["steal_ns"])) as f64;
        let d = (ran - thread_cpu as f64) / alive;
        assert!(d.abs() < 0.02, "{tname}: on_ns - steal_ns {ran} vs CPU clock {thread_cpu}");
    }
    let (got, want) = shorty.iter().fold((0.0, 0.0), |(g, w), (a, b)| (g + a, w + b));
    assert!((got - want).abs() < 0.03, "shorty: short_wait + short_work {got:.4} vs truth {want:.4}");
    // An on-CPU leaf inside libc keeps its caller: clock_gettime under now() under burn().
    let any_libc_leaf = of_type(&recs, "stack").iter().any(|s| {
        let n = syms.funcs(&ustack(s));
        n.last().map(String::as_str) == Some("now") && ustack(s).len() > n.len()
    });
    assert!(any_libc_leaf, "no on-CPU stack with a libc leaf under now()");
    assert_rooted(&d.join("on.jsonl"), 0.99);
}

/// A program built as distributions build theirs (no frame pointers),
/// nearly all of its time in `clock_gettime`'s vDSO code: its samples keep
/// every caller. Without the vDSO's own unwind table about 1% of them
/// were that one frame alone; and when the first read of its maps came
/// before the loader mapped libc (a third of launches here), every stack
/// ended at its first libc frame, `__libc_start_call_main`.
#[test]
fn vdso_samples_keep_their_callers() {
    if skip() {
        return;
    }
    let d = util::scratch("capture-vdso");
    let bin = util::build_c_with("tests/programs/capture/clockloop.c", &d, "clockloop", &["-O2", "-g", "-fomit-frame-pointer"]);
    for round in 0..3 {
        let out = d.join(format!("on.{round}.jsonl"));
        let st = tool("oncputime").args(["-F", "999", "-o"]).arg(&out).arg("--").arg(&bin).arg("0.7").status().unwrap();
        assert!(st.success());
        assert_rooted(&out, 0.995);
    }
}

/// Another tracer's program on sched_switch, attached before ours, runs
/// first at every switch, so our stamp of each switch-in comes late by its
/// run time (microseconds: it copies a stack). A thread of short slices
/// (shorty wakes 8 times per 1.4 ms) lost up to a sixth of its CPU time
/// so; its on-CPU time less steal must still be its CPU clock.
#[test]
fn second_tracer_on_the_tracepoint_costs_no_cpu_time() {
    if skip() {
        return;
    }
    let d = util::scratch("capture-second-tracer");
    let mut first = tool("offcputime")
        .arg("-o")
        .arg(d.join("first.jsonl"))
        .arg("--")
        .arg(workload())
        .arg("5")
        .arg(util::root().join("target/test-tmp"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let (recs, truth) = launch("oncputime", &["--exact"], &d.join("on.jsonl"), "3");
    assert!(first.wait().unwrap().success());
    for tname in ["shorty", "mixer", "lock1"] {
        let (tid, _, funcs) = &truth.threads[tname];
        let t = thread_rec(&recs, *tid);
        let cpu = funcs.values().map(|f| f.0).sum::<u64>() as f64;
        let ran = (u(&t["on_ns"]) - u(&t["steal_ns"])) as f64;
        eprintln!("second tracer: {tname:7} on-CPU less steal {:.1} ms, CPU clock {:.1} ms", ran / 1e6, cpu / 1e6);
        // The clock counts the functions only: the loop around them is a
        // little more, never less.
        assert!((ran - cpu).abs() < 0.03 * cpu, "{tname}: on_ns - steal_ns {ran} vs CPU clock {cpu}");
    }
}

/// Attach with -p to a running workload: the thread blocked since before
/// the capture is counted from the start, under long_sleep; the target
/// exits mid-capture and everything is still written and symbolizable.
#[test]
fn attach_to_running_process_that_exits() {
    if skip() {
        return;
    }
    let d = util::scratch("capture-attach");
    let wl = workload();
    let child = Command::new(&wl)
        .arg("6")
        .arg(util::root().join("target/test-tmp"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let pid = child.id().to_string();
    let t0 = Instant::now();
    let off = tool("offcputime").args(["-p", &pid, "-d", "30", "-o"]).arg(d.join("off.jsonl")).spawn().unwrap();
    let on = tool("oncputime").args(["--exact", "-p", &pid, "-F", "999", "-o"]).arg(d.join("on.jsonl")).arg("30").spawn().unwrap();
    let wout = child.wait_with_output().unwrap();
    let (off, on) = (off.wait_with_output().unwrap(), on.wait_with_output().unwrap());
    assert!(off.status.success() && on.status.success());
    assert!(t0.elapsed() < Duration::from_secs(15), "the tools did not stop when the target exited");
    let truth = truth(&wout.stdout);
    for (file, with_off) in [("off.jsonl", true), ("on.jsonl", false)] {
        let recs = records(&d.join(file));
        let worst = check_accounting(&recs, with_off);
        eprintln!("{file}: worst accounting error {:.3}%", worst * 100.0);
        assert!(of_type(&recs, "stack").len() > 10, "{file}: few stacks");
        assert_eq!(of_type(&recs, "stats").len(), 1);
        let syms = Syms::new(&recs, &wl);
        let named = of_type(&recs, "stack").iter().filter(|s| !syms.funcs(&ustack(s)).is_empty()).count();
        assert!(named > 10, "{file}: stacks not symbolizable through Maps after exit");
    }
    let recs = records(&d.join("off.jsonl"));
    let syms = Syms::new(&recs, &wl);
    let (tid, ..) = truth.threads["sleeper"];
    let t = thread_rec(&recs, tid);
    let alive = u(&t["end_ns"]) - u(&t["start_ns"]);
    let under: u64 = stacks_of(&recs, tid)
        .iter()
        .filter(|s| syms.funcs(&ustack(s)).iter().any(|n| n == "long_sleep"))
        .map(|s| u(&s["ns"]))
        .sum();
    eprintln!("sleeper: {:.2}% of its time off-CPU under long_sleep", under as f64 * 100.0 / alive as f64);
    // After its sleep the thread ends under other stacks: tens of ms on a
    // loaded machine, which matter when a slow attach left a short window.
    let rest = (alive / 50).max(100_000_000);
    assert!(under + rest > alive, "sleeper: only {under} of {alive} ns under long_sleep");
    // Its one long block (the exit may add a sliver under another stack)
    // carries the kernel stack it was blocked in.
    let sleeps: Vec<&Value> =
        stacks_of(&recs, tid).into_iter().filter(|s| syms.funcs(&ustack(s)).iter().any(|n| n == "long_sleep")).collect();
    for s in &sleeps {
        eprintln!("sleeper stack: {} ns, state {}, {} kernel frames", s["ns"], s["state"], s["kstack"].as_array().map_or(0, Vec::len));
    }
    let main = *sleeps.iter().max_by_key(|s| u(&s["ns"])).unwrap();
    assert!(u(&main["ns"]) as f64 > 0.95 * under as f64, "sleeper's time split: {main}");
    assert!(!main["kstack"].as_array().unwrap().is_empty(), "blocked-before-start thread has no kernel stack");
}

#[test]
fn sigint_writes_everything() {
    if skip() {
        return;
    }
    let d = util::scratch("capture-sigint");
    // It runs long enough to outlive a slow attach; it is killed at the end.
    let mut child = Command::new(workload()).arg("60").arg(&d).stdout(Stdio::null()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let out = d.join("off.jsonl");
    let ready = d.join("ready");
    let _ = std::fs::remove_file(&ready);
    let t = tool("offcputime").args(["-p", &child.id().to_string(), "-o"]).arg(&out).arg("--ready-file").arg(&ready).spawn().unwrap();
    // Attached (however long loading took on a busy machine), then 1.5 s.
    let t0 = std::time::Instant::now();
    while !ready.exists() {
        assert!(t0.elapsed() < Duration::from_secs(60), "offcputime never became ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(1500));
    // The window is on CLOCK_MONOTONIC; it opened before the tool read
    // every thread's state from /proc (over a second on a loaded machine),
    // so its end is measured from the SIGINT, not from the ready file.
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime into a local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let sigint_ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(t.id() as i32, libc::SIGINT) };
    let o = t.wait_with_output().unwrap();
    assert!(o.status.success(), "offcputime after SIGINT: {}", o.status);
    let recs = records(&out);
    assert_eq!(recs[0]["type"], "header");
    assert_eq!(recs.last().unwrap()["type"], "stats");
    let hdr = &recs[0];
    let window = u(&hdr["end_ns"]) - u(&hdr["start_ns"]);
    assert!(window > 1_500_000_000, "window {window}");
    // Stopped at the SIGINT: the window ends within a second of it.
    let after = u(&hdr["end_ns"]) as i64 - sigint_ns as i64;
    assert!((0..1_000_000_000).contains(&after), "window ended {after} ns after the SIGINT");
    assert!(of_type(&recs, "thread").len() >= 9);
    check_accounting(&recs, true);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn launched_command_exit_code_and_output_kept_apart() {
    if skip() {
        return;
    }
    for t in ["offcputime", "oncputime"] {
        let o = tool(t)
            .args(["--", "sh", "-c", "echo hello-from-child; sleep 0.2; exit 7"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(7), "{t}: {}", String::from_utf8_lossy(&o.stderr));
        let stdout = String::from_utf8(o.stdout).unwrap();
        assert!(!stdout.lines().any(|l| l.trim() == "hello-from-child"), "{t}: the command's output is in the stream");
        for l in stdout.lines() {
            serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{t}: not a record: {l}: {e}"));
        }
        assert!(String::from_utf8_lossy(&o.stderr).contains("hello-from-child"));
        assert!(stdout.starts_with("{\"type\":\"header\""));
    }
}

#[test]
fn errors_are_one_clear_line() {
    if skip() {
        return;
    }
    for t in ["offcputime", "oncputime"] {
        let o = tool(t).args(["-p", "999999999", "1"]).output().unwrap();
        assert!(!o.status.success());
        let e = String::from_utf8(o.stderr).unwrap();
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains("no such process: 999999999"), "{e}");
        let o = tool(t).args(["--", "/nonexistent/command"]).output().unwrap();
        assert!(!o.status.success());
        let e = String::from_utf8(o.stderr).unwrap();
        assert!(e.contains("cannot run /nonexistent/command"), "{e}");
        // Not root: drop to nobody.
        let o = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
            .arg(util::bin(t))
            .args(["-d", "1"])
            .output()
            .unwrap();
        assert!(!o.status.success());
        let e = String::from_utf8(o.stderr).unwrap();
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains("needs root") && e.contains("CAP_BPF"), "{e}");
    }
}

/// `-f` writes bcc-style folded lines (µs for offcputime), named
/// in-process: the tool is run as a lone copy in a directory without
/// stacksym (or anything else of the toolkit) beside it.
#[test]
fn folded_output() {
    if skip() {
        return;
    }
    let wl = workload();
    let dir = util::scratch("capture-folded");
    let alone = dir.join("offcputime");
    std::fs::copy(util::bin("offcputime"), &alone).unwrap();
    assert!(!dir.join("stacksym").exists());
    // A file just written can be busy for a moment: a child another test
    // forked while it was open for writing holds it until its exec.
    let run = || Command::new(&alone).arg("-f").arg("--").arg(&wl).args(["1.5"]).arg(&dir).output();
    let o = (0..50)
        .find_map(|_| match run() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(20));
                None
            }
            r => Some(r.unwrap()),
        })
        .expect("the copy of offcputime stayed busy for 1 s");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let text = String::from_utf8(o.stdout).unwrap();
    let mut lines = Vec::new();
    for l in text.lines().filter(|l| !l.starts_with('{')) {
        let (stack, v) = l.rsplit_once(' ').unwrap_or_else(|| panic!("not folded: {l}"));
        lines.push((stack.to_string(), v.parse::<u64>().unwrap_or_else(|_| panic!("bad value: {l}"))));
    }
    assert!(lines.len() > 5, "{text}");
    // The sleeper's time under its own function, by name, against its own
    // clocks (the workload's JSON line): a loaded machine lengthens the
    // sleep (the wait for a CPU after the timer fired), and both see it.
    // Off-CPU only here: its CPU time is the part the folded lines lack.
    // (With -f on stdout, the command's stdout goes to stderr.)
    let truth: Value = err.lines().find(|l| l.starts_with("{\"pid\"")).map(|l| serde_json::from_str(l).unwrap()).expect("the workload's JSON line on stderr");
    let (wall, cpu) = truth["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|t| t["funcs"].get("long_sleep").map(|f| (f["wall_ns"].as_u64().unwrap(), f["cpu_ns"].as_u64().unwrap())))
        .expect("long_sleep in the workload's own figures");
    let sleep: u64 = lines.iter().filter(|(s, _)| s.contains(";long_sleep;")).map(|(_, v)| v).sum();
    let (lo, hi) = ((wall - cpu) / 1000 - 2_000, wall / 1000 + 2_000);
    eprintln!("long_sleep: {sleep} µs off-CPU in the profile; its own clocks: wall {wall} ns, CPU {cpu} ns");
    assert!((lo..=hi).contains(&sleep), "long_sleep {sleep} µs, its own clocks {lo}..{hi} µs\n{text}");
    for f in [";nap;", ";wait_cond;", ";mutex_section;"] {
        assert!(lines.iter().any(|(s, _)| s.contains(f)), "no {f} in\n{text}");
    }
    assert!(lines.iter().any(|(s, _)| s.ends_with("__schedule_[k]")), "{text}");
    // Every frame of the workload's own code is named: no hex address in
    // a line that passes through it.
    for (s, _) in lines.iter().filter(|(s, _)| s.contains(";start;")) {
        assert!(!s.split(';').any(|f| f.starts_with("0x")), "unnamed frame in {s}");
    }
    // The workload is named: nothing said about it. What may stay unnamed
    // is libc's internal code (Debian's libc exports only its API: an
    // internal function a thread is preempted in has no symbol without
    // libc6-dbg, so this depends on where the preemptions fell) and the
    // launched command preempted before its exec (a loaded machine): it is
    // still the held copy of offcputime, whose outermost caller may stay
    // unnamed, but whose launcher code (spawn_held_env) is named.
    for l in err.lines().filter(|l| l.contains("frames left as")) {
        assert!(l.contains("frames left as [unknown]+0x...") || l.contains("frames left as libc.so"), "{l}");
    }
    for (s, _) in lines.iter().filter(|(s, _)| s.contains("[unknown]")) {
        assert!(s.contains(";spawn_held_env;") || s.contains(";__x64_sys_execve_[k];"), "unnamed outside the launch: {s}");
    }
}

/// A module `-f` cannot name (a stripped copy of the workload without a
/// debug file) is said once, in one line on stderr, and its frames stay
/// MODULE+0xOFFSET; libc beside it is still named.
#[test]
fn folded_output_says_what_it_cannot_name() {
    if skip() {
        return;
    }
    let dir = util::scratch("capture-folded-stripped");
    let stripped = dir.join("wl-stripped");
    std::fs::copy(workload(), &stripped).unwrap();
    let st = Command::new("strip").arg(&stripped).status().unwrap();
    assert!(st.success());
    let o = tool("offcputime").arg("-f").arg("--").arg(&stripped).args(["0.5"]).arg(&dir).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let said: Vec<&str> = err.lines().filter(|l| l.contains("wl-stripped")).collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(said[0].starts_with("offcputime: warning: frames left as wl-stripped+0x...: no symbols"), "{err}");
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.lines().any(|l| l.contains(";wl-stripped+0x") && l.contains(";__GI___nanosleep")), "{text}");
}

/// `-t TID` keeps one thread of the process; its blocked-before-start
/// stack is still found.
#[test]
fn tid_filter_keeps_one_thread() {
    if skip() {
        return;
    }
    let d = util::scratch("capture-tid");
    // The workload outlives the capture by far: the sleeper sleeps as long
    // as it runs, and a loaded machine has taken over a second to start
    // offcputime (loading and verifying its programs). With 2.5 s, a start
    // later than 1.1 s found the workload gone and wrote no thread at all.
    let mut child = Command::new(workload()).arg("8").arg(&d).stdout(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(400));
    // The sleeper is the third thread created (after main, mixer, waiter).
    let pid = child.id();
    let tids: Vec<u64> = {
        let mut v: Vec<u64> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        v.sort();
        v
    };
    let sleeper = tids
        .iter()
        .copied()
        .find(|t| std::fs::read_to_string(format!("/proc/{pid}/task/{t}/comm")).unwrap_or_default().trim() == "sleeper")
        .expect("sleeper thread");
    let out = d.join("off.jsonl");
    let st = tool("offcputime").args(["-t", &sleeper.to_string(), "-d", "1", "-o"]).arg(&out).status().unwrap();
    assert!(st.success());
    let recs = records(&out);
    let threads = of_type(&recs, "thread");
    assert_eq!(threads.len(), 1, "{threads:?}");
    assert_eq!(u(&threads[0]["tid"]), sleeper);
    let syms = Syms::new(&recs, &workload());
    let stacks = of_type(&recs, "stack");
    assert!(stacks.iter().all(|s| u(&s["tid"]) == sleeper));
    assert!(stacks.iter().any(|s| syms.funcs(&ustack(s)).iter().any(|n| n == "long_sleep")));
    child.kill().unwrap();
    child.wait().unwrap();
}
