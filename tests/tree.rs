//! Process trees: `-- sh -c 'CHILD; sleep 1'`, `-p PID -C` and `--cgroup`,
//! against a workload that measures its own CPU time
//! (tests/programs/tree/treespin.c). Real BPF: run as root (fails otherwise,
//! unless WALLCLOCK_SKIP_ROOT=1 asks to skip).

mod util;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

fn skip() -> bool {
    util::skip_without_root("tree")
}

fn treespin() -> PathBuf {
    static W: OnceLock<PathBuf> = OnceLock::new();
    W.get_or_init(|| {
        util::build_c("tests/programs/tree/treespin.c", &util::root().join("target/test-tmp/tree-bin"), "treespin")
    })
    .clone()
}

/// The stream of `path`, symbolized by target/release/stacksym.
fn symbolized(path: &Path) -> Vec<Value> {
    let out = util::run("stacksym", &[path.to_str().unwrap()], b"");
    assert!(out.status.success(), "stacksym failed: {}", String::from_utf8_lossy(&out.stderr));
    let s = util::resolved(&String::from_utf8(out.stdout).unwrap());
    s.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:.200}: {e}"))).collect()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// What treespin printed: pid -> its CPU time (CLOCK_PROCESS_CPUTIME_ID).
fn truths(stdout: &str) -> HashMap<u64, u64> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["pid"].is_u64())
        .map(|v| {
            let (cpu, ru) = (u(&v["cpu_ns"]), u(&v["rusage_ns"]));
            // The two clocks of the child agree (rusage is in µs).
            assert!(cpu.abs_diff(ru) < cpu / 50 + 2_000_000, "child clocks disagree: {v}");
            (u(&v["pid"]), cpu)
        })
        .collect()
}

fn threads_of(recs: &[Value], pid: u64) -> Vec<&Value> {
    recs.iter().filter(|r| r["type"] == "thread" && u(&r["pid"]) == pid).collect()
}

/// On-CPU time the scheduler gave the process, less steal: what its own
/// CPU clock counts.
fn cpu_of(recs: &[Value], pid: u64) -> u64 {
    threads_of(recs, pid).iter().map(|t| u(&t["on_ns"]).saturating_sub(u(&t["steal_ns"]))).sum()
}

fn funcs_of(recs: &[Value], pid: u64, kind: &str) -> Vec<Vec<String>> {
    recs.iter()
        .filter(|r| r["type"] == "stack" && u(&r["pid"]) == pid && r["kind"] == kind)
        .map(|r| r["frames"].as_array().into_iter().flatten().map(|f| f["func"].as_str().unwrap_or("").to_string()).collect())
        .collect()
}

fn header_pids(recs: &[Value]) -> Vec<u64> {
    recs[0]["pids"].as_array().expect("header pids").iter().map(u).collect()
}

/// `TOOL ARGS -o FILE -- sh -c 'treespin spin 800; sleep 1'`: the child's
/// time is under its own pid and name, within 5% of what it measured.
fn shell_child(tool: &str, extra: &[&str]) {
    if skip() {
        return;
    }
    let dir = util::scratch(&format!("tree-shell-{tool}"));
    let out_file = dir.join("out.jsonl");
    let script = format!("{} spin 800; sleep 1", treespin().display());
    let out = Command::new(util::bin(tool))
        .args(extra)
        .arg("-o")
        .arg(&out_file)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{tool} failed: {}", String::from_utf8_lossy(&out.stderr));
    let truth = truths(&String::from_utf8_lossy(&out.stdout));
    let (&child, &child_cpu) = truth.iter().next().expect("treespin printed nothing");
    let recs = symbolized(&out_file);
    let pids = header_pids(&recs);
    assert!(pids.contains(&child), "header pids {pids:?} lack the child {child}");

    let measured = cpu_of(&recs, child);
    let err = measured.abs_diff(child_cpu) as f64 / child_cpu as f64;
    eprintln!("{tool}: child {child} measured {child_cpu} ns CPU, stream says {measured} ns ({:.2}% off)", err * 100.0);
    assert!(err < 0.05, "{tool}: child's on-CPU time {measured} ns vs its own {child_cpu} ns");
    let comms: Vec<&str> = threads_of(&recs, child).iter().map(|t| t["comm"].as_str().unwrap()).collect();
    assert_eq!(comms, ["treespin"], "the child's name after exec");

    // Its stacks name its own functions.
    let kind = if tool == "oncputime" { "on" } else { "off" };
    let stacks = funcs_of(&recs, child, kind);
    let want = if tool == "oncputime" { "spin_inner" } else { "nap" };
    assert!(
        stacks.iter().any(|s| s.iter().any(|f| f == want) && s.iter().any(|f| f == "main")),
        "{tool}: no stack of the child with main..{want}: {stacks:?}"
    );

    // The shell: its own record, waiting for the child.
    let shell = recs
        .iter()
        .find(|r| r["type"] == "thread" && r["comm"] == "sh" && u(&r["pid"]) != child)
        .unwrap_or_else(|| panic!("no record of the shell in {pids:?}"));
    assert!(pids.contains(&u(&shell["pid"])));
    if tool == "offcputime" {
        let waited = u(&shell["off_ns"]["S"]);
        assert!(waited > child_cpu * 9 / 10, "the shell waited {waited} ns for a child that ran {child_cpu} ns");
    } else {
        assert!(u(&shell["on_ns"]) > 0, "the shell's own on-CPU time: {shell}");
    }
}

#[test]
fn offcputime_follows_a_shell_child() {
    shell_child("offcputime", &[]);
}

#[test]
fn oncputime_follows_a_shell_child() {
    shell_child("oncputime", &["--exact", "-F", "199"]);
}

/// `-p PID -C` on a process that forks a worker once the capture runs.
#[test]
fn children_of_a_pid_are_followed() {
    if skip() {
        return;
    }
    let dir = util::scratch("tree-children");
    let go = dir.join("go");
    let ready = dir.join("ready");
    let out_file = dir.join("out.jsonl");
    let parent = Command::new(treespin()).arg("fork").arg(&go).arg("400").stdout(Stdio::piped()).spawn().unwrap();
    let ppid = parent.id().to_string();
    let mut tool = Command::new(util::bin("offcputime"))
        .args(["-p", &ppid, "-C", "-d", "20", "--ready-file"])
        .arg(&ready)
        .arg("-o")
        .arg(&out_file)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !ready.exists() {
        assert!(t0.elapsed() < Duration::from_secs(20), "offcputime never became ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::write(&go, b"").unwrap();
    let pout = parent.wait_with_output().unwrap();
    let st = tool.wait().unwrap();
    assert!(st.success(), "offcputime -p -C failed");
    assert!(t0.elapsed() < Duration::from_secs(15), "the capture did not end with the tree");
    let truth = truths(&String::from_utf8_lossy(&pout.stdout));
    let (&worker, &cpu) = truth.iter().next().expect("the worker printed nothing");
    let recs = symbolized(&out_file);
    let pids = header_pids(&recs);
    assert!(pids.contains(&worker) && pids.contains(&(ppid.parse().unwrap())), "header pids {pids:?}");
    let measured = cpu_of(&recs, worker);
    eprintln!("-p -C: worker {worker} measured {cpu} ns CPU, stream says {measured} ns");
    assert!(measured.abs_diff(cpu) < cpu / 20, "worker's on-CPU {measured} ns vs its own {cpu} ns");
    let stacks = funcs_of(&recs, worker, "off");
    assert!(stacks.iter().any(|s| s.iter().any(|f| f == "nap")), "no `nap` stack of the worker: {stacks:?}");
}

/// CLOCK_MONOTONIC now, ns: the clock of the stream's window.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The CPU time a process has run so far (its schedstat's first field,
/// what its CPU clock reads), or None once it is gone.
fn schedstat_ns(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?.split_whitespace().next()?.parse().ok()
}

/// Two processes in a cgroup (one there before the capture, one entering
/// during it) and one outside, each spinning until the test stops them
/// after the capture, so that each runs through the whole window however
/// slow the machine is to attach. Each one's captured on-CPU time is
/// compared with what its own CPU clock counted inside the window: sampled
/// every 20 ms during the capture, the samples taken inside the window
/// bound it from below, those around it from above.
#[test]
fn cgroup_takes_its_processes_and_no_others() {
    if skip() {
        return;
    }
    let Some(root) = util::cgroup::cgroup2_mount() else {
        panic!("no cgroup2 file system is mounted: this test needs one");
    };
    let cg = root.join(format!("wallclock-tree-test-{}", std::process::id()));
    std::fs::create_dir(&cg).unwrap_or_else(|e| panic!("mkdir {}: {e}", cg.display()));
    let _guard = util::cgroup::TempCgroup(cg.clone(), root.clone());
    let dir = util::scratch("tree-cgroup");
    let stop = dir.join("stop");
    let procs = cg.join("cgroup.procs");
    let in_cgroup = || {
        let script = format!("echo $$ > {} && exec {} until {}", procs.display(), treespin().display(), stop.display());
        Command::new("sh").args(["-c", &script]).stdout(Stdio::piped()).spawn().unwrap()
    };
    // Stops the spinners however the test ends.
    struct Stop(PathBuf);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = std::fs::write(&self.0, "");
        }
    }
    let _stop = Stop(stop.clone());
    let first = in_cgroup();
    let outsider = Command::new(treespin()).arg("until").arg(&stop).stdout(Stdio::piped()).spawn().unwrap();
    let t0 = Instant::now();
    while std::fs::read_to_string(&procs).unwrap_or_default().trim().is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(5), "the workload never entered the cgroup");
        std::thread::sleep(Duration::from_millis(5));
    }
    let (ready, out_file) = (dir.join("ready"), dir.join("out.jsonl"));
    let mut tool = Command::new(util::bin("offcputime"))
        .arg("--cgroup")
        .arg(&cg)
        .args(["-d", "2", "--ready-file"])
        .arg(&ready)
        .arg("-o")
        .arg(&out_file)
        .spawn()
        .unwrap();
    while !ready.exists() {
        assert!(t0.elapsed() < Duration::from_secs(60), "offcputime never became ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    let second = in_cgroup();
    let pids = [first.id(), second.id()];
    let mut samples: Vec<(u64, [Option<u64>; 2])> = Vec::new();
    let status = loop {
        samples.push((monotonic_ns(), pids.map(schedstat_ns)));
        if let Some(st) = tool.try_wait().unwrap() {
            break st;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "offcputime --cgroup failed");
    std::fs::write(&stop, "").unwrap();
    let mut truth = HashMap::new();
    for c in [first, second] {
        truth.extend(truths(&String::from_utf8_lossy(&c.wait_with_output().unwrap().stdout)));
    }
    let outsider = outsider.wait_with_output().unwrap();
    let outsider_pid = *truths(&String::from_utf8_lossy(&outsider.stdout)).keys().next().unwrap();
    assert_eq!(truth.len(), 2, "both workloads report: {truth:?}");

    let header: Value = serde_json::from_str(std::fs::read_to_string(&out_file).unwrap().lines().next().unwrap()).unwrap();
    let (ws, we) = (u(&header["start_ns"]), u(&header["end_ns"]));
    assert!(we > ws, "the window: {header}");
    let recs = symbolized(&out_file);
    let captured: Vec<u64> = recs.iter().filter(|r| r["type"] == "thread").map(|r| u(&r["pid"])).collect();
    for (i, pid) in pids.iter().enumerate() {
        let at = |t: &(u64, [Option<u64>; 2])| t.1[i];
        // Inside: the first and last samples in the window; around: the
        // last before it (or nothing, then 0) and the first after it.
        let inside: Vec<u64> = samples.iter().filter(|t| (ws..=we).contains(&t.0)).filter_map(at).collect();
        let lo = inside.last().zip(inside.first()).map_or(0, |(l, f)| l - f);
        let before = samples.iter().filter(|t| t.0 < ws).filter_map(at).next_back().unwrap_or(0);
        let after = samples.iter().filter(|t| t.0 > we).find_map(at).unwrap_or(truth[&(*pid as u64)]);
        let hi = after - before;
        let on = cpu_of(&recs, *pid as u64);
        eprintln!("--cgroup: pid {pid} ran {lo}..{hi} ns in the window by its own clock ({} samples inside), {on} ns captured", inside.len());
        // 10 ms: the shell before it moved into the cgroup, and the clocks' ticks.
        assert!(on + 10_000_000 >= lo * 98 / 100, "pid {pid} in the cgroup: {on} ns captured, it ran at least {lo} ns in the window");
        assert!(on <= hi * 102 / 100 + 10_000_000, "pid {pid} in the cgroup: {on} ns captured, it ran at most {hi} ns around the window");
        assert!(lo > 0, "pid {pid}: no sample of it inside the window");
    }
    assert!(!captured.contains(&outsider_pid), "the process outside the cgroup was captured");
    for p in &captured {
        assert!(truth.contains_key(p), "pid {p} is not one of the cgroup's processes {truth:?}");
    }
    let mut hp = header_pids(&recs);
    hp.sort_unstable();
    let mut want: Vec<u64> = truth.keys().copied().collect();
    want.sort_unstable();
    assert_eq!(hp, want, "header pids");
}

/// The one command on a shell that runs a CPU-bound child:
/// `wallclock -- sh -c 'treespin spin 800; sleep 1'` shows the child's CPU
/// time (within 5% of its own rusage) under the child's own root, named
/// after its exec, with its own per-thread files.
#[test]
fn wallclock_follows_a_shell_child() {
    if skip() {
        return;
    }
    let dir = util::scratch("tree-wallclock");
    let prefix = dir.join("sh");
    let script = format!("{} spin 800; sleep 1", treespin().display());
    let out = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["--prefix", prefix.to_str().unwrap(), "--", "sh", "-c", &script])
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "wallclock failed:\n{err}");
    let truth: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("child's truth: {e}: {:?}", String::from_utf8_lossy(&out.stdout)));
    let child = truth["pid"].as_u64().unwrap();
    let rusage = truth["rusage_ns"].as_f64().unwrap();

    let report = Command::new(util::bin("wcreport")).arg("--json").arg(prefix.with_extension("stream")).output().unwrap();
    assert!(report.status.success());
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    let procs = report["processes"].as_array().unwrap();
    let p = procs.iter().find(|p| p["pid"].as_u64() == Some(child)).unwrap_or_else(|| panic!("child {child} has no section: {procs:?}"));
    assert_eq!(p["comm"], "treespin", "the child is named after its exec");
    let threads: Vec<&Value> = report["threads"].as_array().unwrap().iter().filter(|t| t["pid"].as_u64() == Some(child)).collect();
    let ran: f64 = threads.iter().map(|t| t["on_ns"].as_f64().unwrap() - t["steal_ns"].as_f64().unwrap()).sum();
    eprintln!("child {child}: {:.1} ms on-CPU in the report, {:.1} ms by its rusage", ran / 1e6, rusage / 1e6);
    assert!((ran - rusage).abs() <= 0.05 * rusage, "child on-CPU {ran} ns vs rusage {rusage} ns");
    assert!(procs.iter().any(|p| p["comm"] == "sh"), "the shell is there too");

    // The combined folded file: the child's on-CPU time under its own root,
    // in its own functions.
    let folded = std::fs::read_to_string(prefix.with_extension("folded")).unwrap();
    let mut under_child = 0u64;
    for line in folded.lines() {
        let (stack, v) = line.rsplit_once(' ').unwrap();
        let root = stack.split(';').next().unwrap();
        if root.starts_with("treespin") && stack.ends_with("_[c]") && stack.contains(";spin_inner") {
            under_child += v.parse::<u64>().unwrap();
        }
        assert!(!(stack.contains("spin_inner") && root.starts_with("sh")), "child's frames under the shell's root: {line}");
    }
    let under_child = under_child as f64 * 1e3;
    eprintln!("folded: {:.1} ms in spin_inner under the treespin root", under_child / 1e6);
    assert!(under_child >= 0.9 * rusage, "only {under_child} ns of {rusage} ns under the child's root in spin_inner");
    // Several processes: each has its own directory of per-thread files.
    let pdir = std::fs::read_dir(dir.join("multithread_sh"))
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy() == format!("treespin_{child}"))
        .unwrap_or_else(|| panic!("no per-process directory treespin_{child}"))
        .path();
    let files: Vec<String> = std::fs::read_dir(&pdir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    for ext in [".svg", ".folded", "_analysis.txt"] {
        assert!(files.iter().any(|f| f.starts_with(&format!("thread_{child}_")) && f.ends_with(ext)), "{}: no {ext} in {files:?}", pdir.display());
    }
}

/// `offcputime -- dethread`: a second thread spins, then execs `sleep 1`
/// and so takes the leader's tid (de_thread). That thread is one thread
/// in the stream, under the tid it was born with: its on-CPU time is what
/// its own clock counted (its entry used to stay "running" to the stop:
/// a second of on-CPU time too many), and its time after the exec is its
/// own, most of it in sleep's timer wait.
#[test]
fn a_thread_that_execs_keeps_its_time() {
    if skip() {
        return;
    }
    let dir = util::scratch("tree-dethread");
    let bin = util::build_c("tests/programs/tree/dethread.c", &dir, "dethread");
    let out_file = dir.join("off.jsonl");
    let out = Command::new(util::bin("offcputime")).arg("-o").arg(&out_file).arg("--").arg(&bin).arg("300").output().unwrap();
    assert!(out.status.success(), "offcputime failed: {}", String::from_utf8_lossy(&out.stderr));
    let truth: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&out.stdout)));
    let (leader, tid, cpu) = (u(&truth["leader"]), u(&truth["tid"]), u(&truth["cpu_ns"]));

    let recs = symbolized(&out_file);
    let thread = |t: u64| recs.iter().find(|r| r["type"] == "thread" && u(&r["tid"]) == t).unwrap_or_else(|| panic!("no thread {t}"));
    let (th, lt) = (thread(tid), thread(leader));
    let ran = u(&th["on_ns"]).saturating_sub(u(&th["steal_ns"]));
    eprintln!("thread {tid}: {:.1} ms on-CPU, its clock {:.1} ms at its exec", ran as f64 / 1e6, cpu as f64 / 1e6);
    // After the exec, sleep runs for a millisecond or two.
    assert!(ran + 50_000_000 > cpu && ran < cpu + 100_000_000, "thread {tid}: {ran} ns on-CPU, its clock {cpu} ns: {th}");
    let life = u(&th["end_ns"]) - u(&th["start_ns"]);
    let off: u64 = th["off_ns"].as_object().unwrap().values().map(u).sum();
    assert_eq!(u(&th["on_ns"]) + off, life, "thread {tid} does not add up: {th}");
    // Its second after the exec is its own, under sleep's timer wait.
    let asleep: u64 = recs
        .iter()
        .filter(|r| r["type"] == "stack" && u(&r["tid"]) == tid && r["kind"] == "off")
        .filter(|r| r["frames"].as_array().into_iter().flatten().any(|f| f["func"].as_str().is_some_and(|n| n.contains("nanosleep"))))
        .map(|r| u(&r["ns"]))
        .sum();
    assert!(asleep > 900_000_000, "thread {tid}: {asleep} ns under nanosleep after its exec");
    // The leader died at the exec, before the thread that took its tid.
    assert!(u(&lt["end_ns"]) < u(&th["end_ns"]) - 900_000_000, "the leader outlived the exec: {lt}");
    assert!(recs.iter().all(|r| !(r["type"] == "stack" && r["frames"].to_string().contains("[lost stack]") && u(&r["pid"]) == leader)));
}
