//! `wcdump PID` (`wallclock dump PID`) on a program whose threads are in
//! known states (tests/programs/dump/states.c): each thread's own
//! function named in its stack, its state, the sleeper's time in its
//! state against the program's own clock, under a second also for a
//! process of 1,000 threads, and `--json` with the same facts. Loads real
//! BPF programs: run as root.

mod util;

#[path = "runtime_common/mod.rs"]
mod runtime_common;

#[path = "programs/dump/states.rs"]
mod states;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use states::{mono_ns, States, FUNCS};

fn program() -> PathBuf {
    util::build_c("tests/programs/dump/states.c", &util::root().join("target/test-tmp/dump-bin"), "states")
}

/// `wcdump --json PID`, parsed, how long it took and the CPU time it
/// used. On a 2-CPU machine shared with other builds (load average 16)
/// the wall time is mostly waiting for a CPU: the CPU time says what the
/// dump costs; for the wall time it runs at nice -10 (as an operator's
/// dump of a hung process on a busy machine would), and the best of a
/// few runs is taken.
fn dump_json(pid: u32) -> (Value, Duration, Duration) {
    use std::io::Read;
    let t = Instant::now();
    // Waited for below with wait4, for its rusage.
    #[allow(clippy::zombie_processes)]
    let mut child = Command::new("nice")
        .args(["-n", "-10"])
        .arg(util::bin("wcdump"))
        .args(["--json", &pid.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    child.stderr.take().unwrap().read_to_end(&mut err).unwrap();
    // The dump's own CPU time, from its own rusage: RUSAGE_CHILDREN would
    // also count the other tests' children reaped meanwhile (a states
    // program's two spinners: 515 ms once).
    let mut status = 0;
    // SAFETY: ru is a valid rusage for wait4 to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: status and ru are valid for wait4 to write; the pid is our own
    // child (nice execs wcdump), not yet waited for.
    let r = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut ru) };
    let took = t.elapsed();
    assert_eq!(r, child.id() as libc::pid_t, "wait4: {}", std::io::Error::last_os_error());
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "wcdump failed: {}", String::from_utf8_lossy(&err));
    let tv = |t: libc::timeval| Duration::from_micros(t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64);
    (serde_json::from_slice(&out).expect("wcdump --json is not JSON"), took, tv(ru.ru_utime) + tv(ru.ru_stime))
}

fn thread(d: &Value, tid: u32) -> &Value {
    d["threads"].as_array().unwrap().iter().find(|t| t["tid"] == tid).unwrap_or_else(|| panic!("thread {tid} not in the dump: {d}"))
}

fn funcs(t: &Value) -> Vec<&str> {
    t["frames"].as_array().unwrap().iter().map(|f| f["func"].as_str().unwrap()).collect()
}

fn expected_states(name: &str) -> &'static [&'static str] {
    match name {
        "spin1" | "spin2" => &["running", "runnable"],
        // Between two writes it runs (or waits for a CPU) a moment.
        "syncer" => &["disk", "running", "runnable"],
        _ => &["sleeping"],
    }
}

#[test]
fn dump_names_each_threads_function_state_and_time_in_it() {
    if util::skip_without_root("wcdump") {
        return;
    }
    let dir = util::scratch("dump-states");
    let s = States::start(&program(), &dir, 0);
    std::thread::sleep(Duration::from_millis(700));
    let mut syncer_in_disk = 0;
    let mut best = Duration::MAX;
    for round in 0..5 {
        let before = mono_ns();
        let (d, took, cpu) = dump_json(s.pid);
        let after = mono_ns();
        assert!(cpu < Duration::from_millis(500), "wcdump used {cpu:?} of CPU");
        best = best.min(took);
        assert_eq!(d["pid"], s.pid);
        assert_eq!(d["threads"].as_array().unwrap().len(), 7, "{d}");
        for (name, func) in FUNCS {
            let t = thread(&d, s.tids[name]);
            assert_eq!(t["name"], name);
            let f = funcs(t);
            assert!(f.contains(&func), "round {round}: {name}'s stack lacks {func}: {f:?}");
            let st = t["state"].as_str().unwrap();
            assert!(expected_states(name).contains(&st), "round {round}: {name} is {st}, stack {f:?}");
            if name == "syncer" && st == "disk" {
                assert!(f.iter().any(|f| f.contains("fdatasync") || f.contains("pwrite")), "round {round}: the syncer in D in {f:?}");
                syncer_in_disk += 1;
            }
        }
        // The waiter's stack goes through the mutex into the futex wait,
        // and it waits on the mutex, named by its symbol (`lock`); the
        // sleeper's nanosleep waits on nothing; the syncer, read in its
        // write or flush, on its file.
        let w = funcs(thread(&d, s.tids["waiter"]));
        assert!(w.iter().any(|f| f.contains("futex")), "the waiter's stack has no futex frame: {w:?}");
        assert_eq!(thread(&d, s.tids["waiter"])["object"], "lock lock", "round {round}: the waiter's object");
        assert!(thread(&d, s.tids["sleeper"]).get("object").is_none(), "round {round}: the sleeper waits on something");
        let sy = thread(&d, s.tids["syncer"]);
        if let Some(o) = sy.get("object") {
            assert_eq!(o.as_str(), Some(format!("file {}/states.sync", dir.display()).as_str()), "round {round}: the syncer's object");
        }
        let sl = thread(&d, s.tids["sleeper"]);
        let got = sl["state_s"].as_f64().expect("the sleeper's time in its state");
        // Asleep from the time it printed to the time it was read.
        let at = sl["at_ns"].as_u64().unwrap();
        assert!(at >= before && at <= after, "read at {at}, not within the run {before}..{after}");
        let truth = (at - s.sleeper_since) as f64 / 1e9;
        assert!((got - truth).abs() < 0.1, "round {round}: sleeper asleep {got:.3}s, truth {truth:.3}s");
        eprintln!("round {round}: wcdump took {took:?} ({cpu:?} CPU), sleeper {got:.4}s (truth {truth:.4}s), syncer seen in D {syncer_in_disk} times");
    }
    assert!(best < Duration::from_secs(1), "wcdump took {best:?} at best");
    // Between its writes it waits for a CPU, on a loaded machine most of
    // the time: dump until it is seen in its write (at most 60 dumps or
    // 20 s), and say how much of its time the kernel counted off-CPU
    // (its schedstat: neither running nor runnable is D for it) if not.
    let (tid, t0) = (s.tids["syncer"], Instant::now());
    let off0 = off_cpu_ns(s.pid, tid);
    let mut dumps = 5;
    while syncer_in_disk == 0 && dumps < 65 && t0.elapsed() < Duration::from_secs(20) {
        let (d, _, _) = dump_json(s.pid);
        dumps += 1;
        let t = thread(&d, tid);
        if t["state"] == "disk" {
            let f = funcs(t);
            assert!(f.contains(&"sync_loop"), "{t}");
            assert!(f.iter().any(|f| f.contains("fdatasync") || f.contains("pwrite")), "{t}");
            syncer_in_disk += 1;
        }
    }
    let off = (off_cpu_ns(s.pid, tid) - off0) as f64 / t0.elapsed().as_nanos() as f64;
    assert!(syncer_in_disk > 0, "the syncer was never seen in disk (D) in {dumps} dumps; the kernel counted {:.1}% of its time off-CPU meanwhile", off * 100.0);
}

/// A thread's time neither on a CPU nor waiting for one since it started:
/// its /proc schedstat (run and run-queue ns) taken from its age.
fn off_cpu_ns(pid: u32, tid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).unwrap();
    let v: Vec<u64> = stat.split_whitespace().map(|x| x.parse().unwrap()).collect();
    let start = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).unwrap();
    let ticks: u64 = start.rsplit(')').next().unwrap().split_whitespace().nth(19).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    let age = (ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64).saturating_sub(ticks * 1_000_000_000 / hz);
    age.saturating_sub(v[0] + v[1])
}

/// The text (through the wrapper) says the same as the JSON.
#[test]
fn dump_text_through_the_wrapper() {
    if util::skip_without_root("wcdump") {
        return;
    }
    let dir = util::scratch("dump-text");
    let s = States::start(&program(), &dir, 0);
    std::thread::sleep(Duration::from_millis(300));
    // `-p PID`, as the capture tools spell it (the positional PID is the
    // other tests').
    let out = Command::new(util::root().join("scripts/wallclock"))
        .args(["dump", "-p", &s.pid.to_string()])
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "wallclock dump failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.starts_with(&format!("Process {} (states): 7 threads", s.pid)), "{text}");
    for (name, func) in FUNCS {
        let head = format!("Thread {} \"{name}\" ", s.tids[name]);
        let block = text.split("\n\n").find(|b| b.starts_with(&head)).unwrap_or_else(|| panic!("no {head:?} in\n{text}"));
        let st = block[head.len()..].split(' ').next().unwrap();
        assert!(expected_states(name).contains(&st), "{name} is {st}:\n{block}");
        assert!(block.lines().skip(1).any(|l| l.trim_start().starts_with(func)), "{name}'s stack lacks {func}:\n{block}");
    }
    // The sleeper has slept since its start: whole seconds, not a fraction.
    assert!(text.contains("\"sleeper\" sleeping for "), "{text}");
    // The waiter waits on the mutex, named by its symbol.
    let head = format!("Thread {} \"waiter\" sleeping for ", s.tids["waiter"]);
    let line = text.lines().find(|l| l.starts_with(&head)).unwrap_or_else(|| panic!("no {head:?} in\n{text}"));
    assert!(line.contains(" on [lock lock] (CPU "), "{line}");
}

#[test]
fn dump_of_a_thousand_threads_is_under_a_second() {
    if util::skip_without_root("wcdump") {
        return;
    }
    let dir = util::scratch("dump-1000");
    let s = States::start(&program(), &dir, 1000);
    std::thread::sleep(Duration::from_millis(300));
    // The best of five, for the CPU time as for the wall time: on this
    // 2-CPU VM the other tests of this binary (a JVM starting) raised a
    // dump's CPU time from 290 to 534 ms within one run of the five.
    let (mut best, mut least_cpu) = (Duration::MAX, Duration::MAX);
    for _ in 0..5 {
        let (d, took, cpu) = dump_json(s.pid);
        let threads = d["threads"].as_array().unwrap();
        assert_eq!(threads.len(), 1007);
        let extra = threads.iter().filter(|t| funcs(t).contains(&"extra") && t["state"] == "sleeping").count();
        assert_eq!(extra, 1000, "not every extra thread was named asleep in `extra`");
        eprintln!("1,007 threads: wcdump took {took:?}, {cpu:?} of CPU (read {} ms)", d["read_ms"]);
        best = best.min(took);
        least_cpu = least_cpu.min(cpu);
    }
    assert!(least_cpu < Duration::from_millis(500), "wcdump of 1,007 threads used {least_cpu:?} of CPU at least");
    assert!(best < Duration::from_secs(1), "wcdump of 1,007 threads took {best:?} at best");
}

/// A Python process: each thread's Python frames where CPython runs them,
/// as the capture names them, on Debian's 3.11 and pyenv's 3.12 and 3.13
/// where installed: the main thread in `nap`, "cruncher" in `crunch`,
/// "sorter"'s key function (called from C, `sorted`) leafward of the
/// inner eval call and `sorter` at the outer one; Python's thread names.
/// The main thread is dumped once it is asleep in `nap` (it prints
/// `ready` just before).
#[test]
fn dump_reads_python_frames_where_they_run() {
    if util::skip_without_root("wcdump") {
        return;
    }
    let mut pythons = vec![PathBuf::from("/usr/bin/python3")];
    if std::env::var_os("WALLCLOCK_SKIP_PYENV").is_none() {
        let home = std::env::var("HOME").unwrap_or_default();
        for v in ["3.12", "3.13"] {
            let found = std::fs::read_dir(format!("{home}/.pyenv/versions")).into_iter().flatten().flatten().map(|e| e.path()).find(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("{v}.")));
            pythons.extend(found.map(|p| p.join("bin/python3")));
        }
    }
    let script = util::root().join("tests/programs/dump/pystates.py");
    for py in pythons {
        let mut child = Command::new(&py).arg(&script).stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        assert_eq!(line.trim(), "ready", "{}", py.display());
        // `ready` is written before the main thread is back from print (on
        // a loaded machine it waits there for the GIL the cruncher holds),
        // and in nap it drops the GIL before it sleeps (with a switch
        // request pending it waits in drop_gil for the cruncher to take
        // it): dump until it is asleep in nap, for 10 s at most.
        let in_nap = |d: &Value| {
            let f = funcs(thread(d, child.id()));
            f.iter().any(|f| f.starts_with("py::nap:")) && f.iter().any(|f| f.contains("clock_nanosleep"))
        };
        let until = Instant::now() + Duration::from_secs(10);
        let d = loop {
            let (d, _, _) = dump_json(child.id());
            if in_nap(&d) || Instant::now() > until {
                break d;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let _ = child.kill();
        let _ = child.wait();
        let by_name = |n: &str| d["threads"].as_array().unwrap().iter().find(|t| t["name"] == n).unwrap_or_else(|| panic!("{}: no thread {n}: {d}", py.display())).clone();
        let main = funcs(thread(&d, child.id())).iter().map(|f| f.to_string()).collect::<Vec<_>>();
        let at = |f: &[String], name: &str| f.iter().position(|x| x.starts_with(&format!("py::{name}:"))).unwrap_or_else(|| panic!("{}: no py::{name} in {f:?}", py.display()));
        assert!(at(&main, "nap") < at(&main, "<module>"), "{}: {main:?}", py.display());
        let sleep = main.iter().position(|f| f.contains("clock_nanosleep")).unwrap_or_else(|| panic!("{}: the main thread not asleep in 10 s: {main:?}", py.display()));
        assert!(sleep < at(&main, "nap"), "{}: the sleep is not leafward of nap: {main:?}", py.display());
        let c: Vec<String> = funcs(&by_name("cruncher")).iter().map(|f| f.to_string()).collect();
        assert_eq!(at(&c, "crunch"), c.iter().position(|f| f.starts_with("py::")).unwrap(), "{}: {c:?}", py.display());
        let s: Vec<String> = funcs(&by_name("sorter")).iter().map(|f| f.to_string()).collect();
        let (key, outer) = (at(&s, "slow_key"), at(&s, "sorter"));
        let eval = s.iter().enumerate().position(|(i, f)| i > key && f.starts_with("_PyEval_EvalFrameDefault"));
        assert!(eval.is_some_and(|e| e < outer), "{}: slow_key and sorter not in two eval calls: {s:?}", py.display());
    }
}

/// Java and Node, with no flag: their methods and functions named in the
/// dump as the capture names them (the HotSpot walker, V8's heap), each
/// under its caller, and the thread's stack whole, from the leaf to the
/// thread's start, in at least 4 of 5 dumps of a thread that computes (it
/// may be between two calls at a dump). The thread is running as it is
/// read: its registers saved at its last kernel entry are long stale (a
/// Node dump read `getpid` under a garbage collection long over, then a
/// stack word for a return address), so the dump takes it at its own
/// clock's tick.
#[test]
fn dump_names_java_methods_and_javascript_functions() {
    if util::skip_without_root("wcdump") {
        return;
    }
    let progs = util::root().join("tests/programs/dump");
    let runs: [(&str, &str, &str, &str, &str); 2] =
        [("java", "openjdk-17-jdk-headless", "Spin.java", "Spin.spin(", "Spin.loop("), ("node", "nodejs", "spin.js", "spinFor ", "work ")];
    for (prog, package, file, leaf, caller) in runs {
        if !runtime_common::have(prog, package) {
            continue;
        }
        let mut child = Command::new(prog).arg(progs.join(file)).stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        assert_eq!(line.trim(), "ready", "{prog}");
        let mut seen = Vec::new();
        for _ in 0..5 {
            let (d, _, _) = dump_json(child.id());
            let named = d["threads"].as_array().unwrap().iter().find(|t| funcs(t).iter().any(|x| x.contains(leaf)));
            let ok = named.is_some_and(|t| {
                let f = funcs(t);
                let at = |n: &str| f.iter().position(|x| x.contains(n));
                let under = matches!((at(leaf), at(caller)), (Some(a), Some(b)) if a < b);
                let root = f.last().is_some_and(|r| ["_start", "clone3", "__clone3", "start_thread"].contains(r));
                let torn = t["frames"].as_array().unwrap().iter().any(|x| x["module"] == "[stack]" || ["[truncated", "[stack cut", "[unknown"].iter().any(|m| x["func"].as_str().unwrap().starts_with(m)));
                under && root && !torn
            });
            seen.push((ok, named.map(|t| format!("{} {}: {}", t["tid"], t["state"], funcs(t).join(";"))).unwrap_or_default()));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(seen.iter().filter(|s| s.0).count() >= 4, "{prog}: {leaf} under {caller}, whole, in fewer than 4 of 5 dumps: {seen:#?}");
    }
}

#[test]
fn bad_pids_are_one_line_errors() {
    for (args, want) in [
        (&["999999999"][..], "no such process: 999999999"),
        (&["-p", "999999999"][..], "no such process: 999999999"),
        (&["abc"][..], "invalid value 'abc'"),
        (&["-p", "1", "2"][..], "cannot be used with"),
    ] {
        let out = Command::new(util::bin("wcdump")).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "wcdump {args:?}: {err}");
    }
}
