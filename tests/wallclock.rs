//! scripts/wallclock end to end, as root: the demo workload (which measures
//! its own CPU and wall time per function) is profiled by the one command,
//! and the files it writes must agree with that ground truth.

mod util;

use std::collections::BTreeMap;
use std::process::{Command, Output};

use serde_json::Value;

fn skip() -> bool {
    util::skip_without_root("wallclock")
}

fn wallclock(args: &[&str]) -> Output {
    let out = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(args)
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .output()
        .expect("run scripts/wallclock");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    out
}

/// Per folded file: (function, kind marker) -> microseconds, counting each
/// stack once per function it contains.
fn by_function(folded: &str) -> BTreeMap<(String, char), u64> {
    let mut m = BTreeMap::new();
    for line in folded.lines() {
        let (stack, v) = line.rsplit_once(' ').unwrap_or_else(|| panic!("bad folded line {line}"));
        let v: u64 = v.parse().unwrap();
        let kind = if stack.ends_with("_[c]") {
            'c'
        } else if stack.ends_with("_[o]") {
            'o'
        } else {
            panic!("leaf without a kind marker: {line}")
        };
        let mut seen = std::collections::HashSet::new();
        for f in stack.split(';') {
            let f = f.trim_end_matches("_[c]").trim_end_matches("_[o]").to_string();
            if seen.insert(f.clone()) {
                *m.entry((f, kind)).or_default() += v;
            }
        }
    }
    m
}

#[test]
fn demo_profile_agrees_with_ground_truth() {
    if skip() {
        return;
    }
    let dir = util::scratch("wallclock-demo");
    let bin = util::build_demo(&dir);
    let prefix = dir.join("demo");
    // Default flags, as a user types them: every block keeps its stack,
    // however short (demo-prod and demo-cons block for ~100-300 us each).
    let out = wallclock(&["--prefix", prefix.to_str().unwrap(), "--", bin.to_str().unwrap(), "4", dir.join("scratch.dat").to_str().unwrap()]);
    assert!(out.status.success(), "wallclock failed: {}", out.status);
    // The workload's own stdout is its truth: it must not be mixed with anything.
    let truth: Value = serde_json::from_slice(&out.stdout).expect("the workload's stdout is its JSON truth, alone");

    for f in ["demo.svg", "demo.folded", "demo.stream", "demo.pb.gz", "demo_thread_analysis.txt"] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    // go tool pprof reads the profile: wall per thread as the stream's
    // on- and off-CPU stacks have it, to the ns, all of it under frames.
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for l in std::fs::read_to_string(dir.join("demo.stream")).unwrap().lines() {
        let r: Value = serde_json::from_str(l).unwrap();
        if r["type"] == "stack" && (r["kind"] == "on" || r["kind"] == "off") {
            *want.entry(r["tid"].to_string()).or_default() += r["ns"].as_u64().unwrap();
        }
    }
    want.retain(|_, v| *v > 0);
    let pb = dir.join("demo.pb.gz");
    assert_eq!(util::gopprof::total(&pb, "wall"), want.values().sum::<u64>(), "go tool pprof -top: wall");
    let tags = util::gopprof::tags(&pb, "wall");
    assert_eq!(tags["thread_id"], want, "go tool pprof -tags: wall per thread_id");
    assert!(!dir.join("demo_single_thread_analysis.txt").exists(), "6 threads are not single-threaded");
    // Every user frame is named: the vDSO, and the shell that held the
    // target before its exec, included.
    let combined = std::fs::read_to_string(dir.join("demo.folded")).unwrap();
    assert!(!combined.contains("[unknown]"), "unnamed frames: {}", combined.lines().find(|l| l.contains("[unknown]")).unwrap());
    // The tracing machinery that ran our BPF programs is not the thread's.
    assert!(!combined.contains("__traceiter_") && !combined.contains("bpf_prog_"), "dispatch frames left in the stacks");
    let svg = std::fs::read_to_string(dir.join("demo.svg")).unwrap();
    for f in ["compute_chunk", "nap", "write_and_fsync", "locked_update", "pace", "wait_for_item", "handle_item"] {
        assert!(svg.contains(f), "{f} not in the flame graph");
    }

    // The report's accounting: every thread covered within 2% of its life.
    let report = Command::new(util::bin("wcreport")).arg("--json").arg(dir.join("demo.stream")).output().unwrap();
    assert!(report.status.success());
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    let threads: Vec<&Value> = report["threads"].as_array().unwrap().iter().collect();
    assert_eq!(threads.len(), truth["threads"].as_array().unwrap().len(), "one report entry per thread");
    let alive: BTreeMap<u64, u64> = threads.iter().map(|t| (t["tid"].as_u64().unwrap(), t["alive_ns"].as_u64().unwrap())).collect();
    let steal: BTreeMap<u64, u64> = threads.iter().map(|t| (t["tid"].as_u64().unwrap(), t["steal_ns"].as_u64().unwrap())).collect();
    for t in &threads {
        let cov = t["coverage_pct"].as_f64().unwrap();
        assert!((cov - 100.0).abs() <= 2.0, "thread {} coverage {cov}%", t["tid"]);
        // No time without the stack it was spent in.
        let stackless = t["short_blocks_ns"].as_u64().unwrap() + t["lost_stack_ns"].as_u64().unwrap();
        let pct = 100.0 * stackless as f64 / t["alive_ns"].as_u64().unwrap() as f64;
        assert!(pct <= 2.0, "thread {}: {pct:.1}% of its time in [short blocks]/[lost stack]", t["tid"]);
    }
    // The sub-millisecond waits are a large part of their threads' time:
    // the case a stack-less short-block bucket used to hide. (The
    // producer's 150 us sleeps always are; the consumer waits for items
    // only when it keeps up, which a loaded machine does not let it do.)
    for (thread, func, must) in [("demo-prod", "pace", true), ("demo-cons", "wait_for_item", false)] {
        let t = truth["threads"].as_array().unwrap().iter().find(|t| t["thread"] == thread).unwrap();
        let f = &t["functions"][func];
        let off = f["wall_ns"].as_f64().unwrap() - f["cpu_ns"].as_f64().unwrap();
        let life = alive[&t["tid"].as_u64().unwrap()] as f64;
        eprintln!("{thread} {func}: off-CPU {:.0}% of its life", 100.0 * off / life);
        assert!(!must || off / life >= 0.30, "{thread} {func}: off-CPU only {:.0}% of its life", 100.0 * off / life);
    }

    // Each thread's samples (49 Hz) and exact on-CPU time, from the stream.
    let mut sampled: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for l in std::fs::read_to_string(dir.join("demo.stream")).unwrap().lines() {
        let r: Value = serde_json::from_str(l).unwrap();
        if r["type"] == "thread" {
            let e = sampled.entry(r["tid"].as_u64().unwrap()).or_default();
            e.0 += r["samples"].as_u64().unwrap_or(0);
            e.1 += r["on_ns"].as_u64().unwrap_or(0);
        }
    }
    let mdir = dir.join("multithread_demo");
    let mut errors = Vec::new();
    for t in truth["threads"].as_array().unwrap() {
        let tid = t["tid"].as_u64().unwrap();
        let files: Vec<String> = std::fs::read_dir(&mdir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with(&format!("thread_{tid}_")))
            .collect();
        for ext in [".svg", ".folded", "_analysis.txt"] {
            assert!(files.iter().any(|n| n.ends_with(ext)), "thread {tid}: no thread_{tid}_<role>{ext} in {files:?}");
        }
        let folded_name = files.iter().find(|n| n.ends_with(".folded")).unwrap();
        let folded = std::fs::read_to_string(mdir.join(folded_name)).unwrap();
        let funcs = by_function(&folded);
        let life_us = alive[&tid] as f64 / 1e3;
        // Shares of the thread's life in the window, for the profile and
        // for the truth alike (the workload measures only inside its named
        // functions; start-up, joins and truncation are not theirs).
        let fs = t["functions"].as_object().unwrap();
        for (name, f) in fs {
            if name == "lock_wait" {
                continue; // measured inside locked_update, around pthread_mutex_lock
            }
            let cpu = f["cpu_ns"].as_f64().unwrap() / 1e3;
            let off = f["wall_ns"].as_f64().unwrap() / 1e3 - cpu;
            let got_on = *funcs.get(&(name.clone(), 'c')).unwrap_or(&0) as f64;
            let got_off = *funcs.get(&(name.clone(), 'o')).unwrap_or(&0) as f64;
            let (t_on, t_off) = (100.0 * cpu / life_us, 100.0 * off / life_us);
            let (p_on, p_off) = (100.0 * got_on / life_us, 100.0 * got_off / life_us);
            // On a VM the hypervisor takes time from a running vCPU
            // ("steal"): on-CPU for the scheduler, off the workload's CPU
            // clock. The tool shows the thread's steal apart ([steal]) and
            // scales the samples to the rest, so on-CPU shares match the
            // CPU clock; the truth counts steal as off-CPU time, so the
            // function's off-CPU share may fall short by the thread's steal.
            let stolen = 100.0 * steal[&tid] as f64 / 1e3 / life_us;
            // A function's on-CPU share is its share of the thread's
            // samples times the thread's exact on-CPU time: 3 points, and
            // twice the sampling error of that share (binomial in the
            // thread's samples). A quiet run failed at 3 points: the fsync
            // thread's write_and_fsync had 20 of its 33 samples for 77% of
            // its CPU time (25.5 due, 2.3 standard errors), 11.7% of its
            // life vs 15.0%; its off-CPU time, measured exactly, was within
            // 0.1 point.
            let (n, on_ns) = sampled.get(&tid).copied().unwrap_or_default();
            let p = if on_ns > 0 { (cpu * 1e3 / on_ns as f64).clamp(0.0, 1.0) } else { 0.0 };
            let sd = if n > 0 { 100.0 * on_ns as f64 / 1e3 / life_us * (p * (1.0 - p) / n as f64).sqrt() } else { 0.0 };
            eprintln!("thread {tid} {name}: on {p_on:.1}% (truth {t_on:.1}%), off {p_off:.1}% (truth {t_off:.1}%), thread steal {stolen:.1}%, sampling error {sd:.1} points");
            // `pace` runs microseconds between 150 us sleeps: much of its
            // CPU time is in the switch path, where no timer sample lands
            // (docs/tools.md, "On-CPU samples"; a CI-like run read it at
            // 3.8% against 7.6% by its clock), so its on-CPU share may
            // read low by up to 85% of it; never high.
            let blind = if name == "pace" { 0.85 * t_on } else { 0.0 };
            let on_ok = p_on - t_on <= 3.0 + 2.0 * sd && t_on - p_on <= 3.0 + 2.0 * sd + blind;
            let off_ok = t_off - p_off <= 3.0 + stolen && p_off - t_off <= 3.0;
            if !on_ok || !off_ok {
                errors.push(format!("thread {tid} {name}: on {p_on:.1}% vs {t_on:.1}% (sampling error {sd:.1}), off {p_off:.1}% vs {t_off:.1}%"));
            }
        }
    }
    assert!(errors.is_empty(), "shares off by more than 3 points (on-CPU: and 2 sampling errors):\n{}", errors.join("\n"));
    // The overview names every thread.
    let overview = std::fs::read_to_string(dir.join("demo_thread_analysis.txt")).unwrap();
    for t in truth["threads"].as_array().unwrap() {
        assert!(overview.contains(&t["tid"].to_string()), "overview lacks thread {}", t["tid"]);
    }
}

#[test]
fn single_thread_command_and_exit_code() {
    if skip() {
        return;
    }
    let dir = util::scratch("wallclock-single");
    let prefix = dir.join("one");
    let out = wallclock(&["--prefix", prefix.to_str().unwrap(), "--", "sh", "-c", "sleep 1; exit 3"]);
    assert_eq!(out.status.code(), Some(3), "the command's exit code is wallclock's");
    assert!(dir.join("one_single_thread_analysis.txt").is_file() || dir.join("one_thread_analysis.txt").is_file());
    let folded = std::fs::read_to_string(dir.join("one.folded")).unwrap();
    let off: u64 = folded.lines().filter(|l| l.rsplit_once(' ').unwrap().0.ends_with("_[o]")).map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap()).sum();
    // sh waits for sleep ~1 s: most of the window is off-CPU.
    assert!(off >= 900_000, "sh's wait is off-CPU: {off} us");
}

/// The command's time begins at its exec (issue 18, item 4): the shell
/// that holds it at a fifo until both captures are attached (25-150 ms
/// here, blocked in `fifo_open`) is the wrapper's, not the command's. The
/// command measures when its main() began; its thread in the stream, and
/// the window, may begin only the exec and the loader's work before that.
#[test]
fn the_gate_is_not_the_commands_time() {
    if skip() {
        return;
    }
    let dir = util::scratch("wallclock-gate");
    let bin = util::build_c("tests/programs/capture/stamp.c", &dir, "stamp");
    let prefix = dir.join("g");
    let out = wallclock(&["--prefix", prefix.to_str().unwrap(), "--", bin.to_str().unwrap(), "0.3"]);
    assert!(out.status.success(), "wallclock failed: {}", out.status);
    let truth: Value = serde_json::from_slice(&out.stdout).expect("the program's stdout is its truth");
    let (main_ns, end_ns) = (truth["main_ns"].as_u64().unwrap(), truth["end_ns"].as_u64().unwrap());
    let stream = std::fs::read_to_string(dir.join("g.stream")).unwrap();
    let recs: Vec<Value> = stream.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let header = recs.iter().find(|r| r["type"] == "header").unwrap();
    let thread = recs.iter().find(|r| r["type"] == "thread" && r["comm"] == "stamp").expect("the command's thread");
    let (start, t_end) = (thread["start_ns"].as_u64().unwrap(), thread["end_ns"].as_u64().unwrap());
    let before_main = main_ns as f64 / 1e6 - start as f64 / 1e6;
    // The loader's waits for a CPU before main() are the command's own
    // (CI once: 28 ms runnable in `resolve_map` and `_start` on a loaded
    // machine); the gate is a sleep in the wrapper's shell.
    let folded = std::fs::read_to_string(dir.join("g.folded")).unwrap();
    let loader_r_ms: f64 = folded
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(st, _)| st.starts_with("stamp") && !st.contains(";main;") && st.ends_with("[runnable]_[o]"))
        .map(|(_, us)| us.parse::<f64>().unwrap() / 1e3)
        .sum();
    eprintln!("thread begins {before_main:.2} ms before main() ({loader_r_ms:.2} ms of it waiting for a CPU); window start {}", header["start_ns"]);
    assert!(
        start <= main_ns && before_main - loader_r_ms <= 15.0,
        "the thread begins {before_main:.2} ms before its main(), {loader_r_ms:.2} ms of it waiting for a CPU: the gate was counted"
    );
    // (Each capture stamps the exec in its own program: microseconds apart.)
    let window = header["start_ns"].as_u64().unwrap();
    assert!(window.abs_diff(start) < 1_000_000, "the window opens at {window}, the command's exec at {start}");
    let wall = (t_end - start) as f64 / 1e6;
    let own = (end_ns - main_ns) as f64 / 1e6;
    // Less the loader's waits for a CPU before main(), as above: the
    // program's own clock starts at main() (CI at a load of 13: 19.5 ms
    // runnable in `_start`, wall 321.4 ms against its own 300.1 ms).
    assert!(wall - own - loader_r_ms <= 20.0 && wall >= own, "thread wall {wall:.1} ms against its own {own:.1} ms ({loader_r_ms:.1} ms of it waiting for a CPU before main)");
    let folded = std::fs::read_to_string(dir.join("g.folded")).unwrap();
    for f in ["fifo_open", "wait_for_partner", "pipe_read"] {
        assert!(!folded.contains(f), "the gate's wait ({f}) is in the profile: {}", folded.lines().find(|l| l.contains(f)).unwrap());
    }
}

#[test]
fn bad_arguments_are_one_line() {
    for (args, expect) in [
        (vec!["notapid"], "PID must be a number"),
        (vec!["-p", "notapid"], "PID must be a number"),
        (vec!["-p", "1", "2", "3"], "unexpected argument 3"),
        // --cgroup PATH DURATION: the word after it is the duration.
        (vec!["--cgroup", "/nonexistent", "1"], "--cgroup /nonexistent: no such directory"),
        (vec!["-d", "1", "--cgroup", "/nonexistent", "2"], "unexpected argument 2"),
        (vec!["-F", "0", "1"], "-F must be"),
        (vec!["--frequency", "x", "1"], "-F must be"),
        (vec!["999999999"], "no such process"),
    ] {
        let out = wallclock(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}

/// SIGINT sent to the wrapper alone on a PID capture: it stops early and
/// still writes the flame graph, folded stacks and report of what was
/// captured. The wrapper starts with SIGINT ignored, as a script's
/// background job (or nohup's command) does: bash cannot trap a signal
/// ignored at its start, and this SIGINT was dropped whenever the test
/// suite itself ran in the background (the capture ran its full 30 s).
#[test]
fn sigint_stops_early_with_everything_written() {
    if skip() {
        return;
    }
    let dir = util::scratch("wallclock-sigint");
    let mut target = Command::new("sleep").arg("60").spawn().unwrap();
    let prefix = dir.join("int");
    let started = std::time::Instant::now();
    let mut wc = Command::new("bash");
    wc.arg(util::root().join("scripts/wallclock"))
        .args(["-d", "30", "--prefix", prefix.to_str().unwrap(), &target.id().to_string()])
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .stderr(std::process::Stdio::piped());
    // SAFETY: signal(2) only, between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut wc, || {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut wc = wc.spawn().unwrap();
    // Attached (`capturing ...` on stderr; loading takes seconds on a busy
    // machine), then 2 s.
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = wc.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("capturing") {
                let _ = tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let attached = rx.recv_timeout(std::time::Duration::from_secs(60)).is_ok();
    std::thread::sleep(std::time::Duration::from_secs(2));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(wc.id() as i32, libc::SIGINT) };
    let status = wc.wait().unwrap();
    let err = reader.join().unwrap();
    let _ = target.kill();
    let _ = target.wait();
    assert!(attached, "never attached: {err}");
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(started.elapsed().as_secs() < 20, "stopped early");
    let folded = std::fs::read_to_string(dir.join("int.folded")).expect("folded written");
    let off: u64 = folded.lines().filter_map(|l| l.rsplit_once(' ')).filter(|(s, _)| s.ends_with("_[o]")).map(|(_, v)| v.parse::<u64>().unwrap()).sum();
    // About 2 s of sleep, captured before the interrupt.
    assert!((1_500_000..10_000_000).contains(&off), "off-CPU {off} us");
    assert!(folded.contains("clock_nanosleep") || folded.contains("nanosleep"), "{folded}");
    assert!(dir.join("int.svg").is_file());
    assert!(dir.join("int_single_thread_analysis.txt").is_file());
}
