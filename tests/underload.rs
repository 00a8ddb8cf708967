//! Accuracy on a busy machine (issue 28): the ground-truth workload
//! (tests/programs/capture/workload.c: each thread times its own functions
//! with its CPU and wall clocks; two of its threads spin pinned to one
//! CPU) attached by pid while two CPU-bound processes run beside it. The
//! workload gives its figures for the captures' own windows, so shares are
//! compared over the same time. And `[steal]` is never more than the
//! machine's own steal in the window (/proc/stat), system-wide and per
//! process.

mod util;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

fn skip() -> bool {
    util::skip_without_root("underload")
}

fn workload() -> PathBuf {
    static W: OnceLock<PathBuf> = OnceLock::new();
    W.get_or_init(|| util::build_c("tests/programs/capture/workload.c", &util::root().join("target/test-tmp/underload-bin"), "workload")).clone()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Two CPU-bound processes on a 2-CPU machine, killed when dropped.
struct Hogs(Vec<Child>);

impl Hogs {
    fn start() -> Hogs {
        let hog = || Command::new("sha256sum").arg("/dev/zero").stdout(Stdio::null()).spawn().expect("sha256sum");
        let h = Hogs(vec![hog(), hog()]);
        std::thread::sleep(Duration::from_millis(300));
        h
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The machine's steal, interrupt and softirq time so far, all CPUs (ns),
/// from /proc/stat's first line (USER_HZ ticks).
fn machine_steal_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let cpu: Vec<u64> = stat.lines().next().unwrap().split_whitespace().skip(1).map(|v| v.parse().unwrap()).collect();
    // user nice system idle iowait irq softirq steal
    (cpu[5] + cpu[6] + cpu[7]) * (1_000_000_000 / user_hz())
}

fn user_hz() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as u64
    } else {
        100
    }
}

/// /proc/stat counts whole ticks: a delta can fall short of the time
/// it stands for by one tick per CPU.
fn tick_slack_ns() -> u64 {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    cpus * (1_000_000_000 / user_hz())
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn threads(recs: &[Value]) -> HashMap<u64, &Value> {
    recs.iter().filter(|r| r["type"] == "thread").map(|r| (u(&r["tid"]), r)).collect()
}

/// ns per (tid, function) in a stream, each stack counted once per
/// function on it (stackmerge names the raw stacks from their maps).
fn by_function(args: &[&str]) -> HashMap<(u64, String), u64> {
    let out = util::ok("stackmerge", &[&["--folded", "--per-thread", "--unit", "ns"], args].concat(), b"");
    let mut m = HashMap::new();
    for line in out.lines() {
        let (stack, v) = line.rsplit_once(' ').unwrap();
        let frames: Vec<&str> = stack.split(';').collect();
        let tid: u64 = frames[0].rsplit_once('-').unwrap().1.parse().unwrap();
        let mut seen = std::collections::HashSet::new();
        for f in frames {
            let f = f.trim_end_matches("_[c]").trim_end_matches("_[o]");
            if seen.insert(f) {
                *m.entry((tid, f.to_string())).or_default() += v.parse::<u64>().unwrap();
            }
        }
    }
    m
}

/// (thread, function) pairs checked, as in tests/capture.rs.
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

#[test]
fn shares_hold_with_two_cpu_hogs_beside_the_target() {
    if skip() {
        return;
    }
    let d = util::scratch("underload");
    let windows = d.join("windows");
    let _hogs = Hogs::start();
    let steal0 = machine_steal_ns();
    // It runs until the windows are written (30 s at most), however long
    // the captures take to attach on a loaded machine.
    let wl = Command::new(workload()).arg("30").arg(&d).arg(&windows).stdout(Stdio::piped()).spawn().unwrap();
    let pid = wl.id().to_string();
    std::thread::sleep(Duration::from_millis(700));
    // Attached by pid, both captures at once (as scripts/wallclock runs them).
    let (off, on) = (d.join("off.jsonl"), d.join("on.jsonl"));
    let spawn = |tool: &str, extra: &[&str], out: &Path| {
        Command::new(util::bin(tool)).args(extra).args(["-p", &pid, "-d", "4", "-o"]).arg(out).stderr(Stdio::inherit()).spawn().unwrap()
    };
    let mut off_c = spawn("offcputime", &[], &off);
    let mut on_c = spawn("oncputime", &["--exact", "-F", "999"], &on);
    assert!(off_c.wait().unwrap().success(), "offcputime failed");
    assert!(on_c.wait().unwrap().success(), "oncputime failed");
    let steal1 = machine_steal_ns();
    let (offr, onr) = (records(&off), records(&on));
    // The workload's figures for each capture's window.
    let tmp = d.join("windows.tmp");
    let w = |r: &[Value]| format!("{} {}\n", u(&r[0]["start_ns"]), u(&r[0]["end_ns"]));
    std::fs::write(&tmp, w(&offr) + &w(&onr)).unwrap();
    std::fs::rename(&tmp, &windows).unwrap();
    let out = wl.wait_with_output().unwrap();
    assert!(out.status.success());
    let truth: Value = serde_json::from_slice(&out.stdout).expect("workload JSON");

    let offf = by_function(&[off.to_str().unwrap()]);
    let onf = by_function(&["--on", on.to_str().unwrap()]);
    let mut errors = Vec::new();
    let mut shorty = (0.0, 0.0);
    for (i, (recs, funcs, kind)) in [(&offr, &offf, "off"), (&onr, &onf, "on")].into_iter().enumerate() {
        let ths = threads(recs);
        let win = &truth["windows"][i]["threads"];
        for (tname, func) in CHECKED {
            let t = win.as_array().unwrap().iter().find(|t| t["name"] == *tname).unwrap();
            let tid = u(&t["tid"]);
            let r = ths.get(&tid).unwrap_or_else(|| panic!("{kind}: no thread {tname} ({tid}) in the stream"));
            let alive = (u(&r["end_ns"]) - u(&r["start_ns"])) as f64;
            let f = &t["funcs"][*func];
            let (cpu, wall) = (u(&f["cpu_ns"]) as f64, u(&f["wall_ns"]) as f64);
            let want = 100.0 * if kind == "on" { cpu } else { wall - cpu } / alive;
            let got = 100.0 * *funcs.get(&(tid, func.to_string())).unwrap_or(&0) as f64 / alive;
            // Time the hypervisor took from the running thread is on-CPU
            // for the scheduler and shown apart ([steal]); the program's
            // clocks count it as off-CPU: its off share may fall short by
            // the thread's steal (as in tests/wallclock.rs).
            let stolen = if kind == "off" { 100.0 * r["steal_ns"].as_u64().unwrap_or(0) as f64 / alive } else { 0.0 };
            eprintln!("{kind:3} {tname:7} {func:17} tool {got:5.1}% truth {want:5.1}% ({:+.1} points)", got - want);
            if kind == "on" && *tname == "shorty" {
                // A timer sample cannot land while interrupts are off, and
                // short_wait's CPU comes in slices of a few us, mostly
                // the syscall and switch paths: sampling sees less of it
                // than the thread's clock (tests/capture.rs: 34-62% on a
                // quiet machine; here, with two hogs, 55-75%). The rest
                // goes to short_work, the thread's only
                // other code: checked as in tests/capture.rs, the pair's
                // sum exactly below.
                shorty = (shorty.0 + got, shorty.1 + want);
                let (lo, hi) = if *func == "short_wait" { (want * 0.2, want + 3.0) } else { (want - 3.0, 100.0) };
                if got <= lo || got >= hi {
                    errors.push(format!("on shorty/{func}: {got:.1}% vs {want:.1}% (allowed {lo:.1}..{hi:.1})"));
                }
            } else if got - want > 3.0 || want - got > 3.0 + stolen {
                errors.push(format!("{kind} {tname}/{func}: {got:.1}% vs {want:.1}% (thread steal {stolen:.1}%)"));
            }
            if kind == "on" {
                // On-CPU less steal is the thread's CPU clock (the figures
                // are for its functions alone: its loop around them adds a
                // little). Never more than it ran.
                let clock: u64 = t["funcs"].as_object().unwrap().values().map(|f| u(&f["cpu_ns"])).sum();
                let ran = u(&r["on_ns"]) as f64 - u(&r["steal_ns"]) as f64;
                let over = (ran - clock as f64) / alive * 100.0;
                if over.abs() > 1.0 {
                    errors.push(format!("{tname}: on-CPU less steal {ran:.0} ns vs its CPU clock {clock} ns ({over:+.1} points)"));
                }
            }
        }
    }
    eprintln!("shorty on-CPU, both functions: tool {:.1}% truth {:.1}%", shorty.0, shorty.1);
    if (shorty.0 - shorty.1).abs() > 3.0 {
        errors.push(format!("on shorty: short_wait + short_work {:.1}% vs {:.1}%", shorty.0, shorty.1));
    }
    // Steal: never more than the machine's in a window that holds the capture's.
    let machine = steal1 - steal0;
    for (recs, tool) in [(&offr, "offcputime"), (&onr, "oncputime")] {
        let s: u64 = recs.iter().filter(|r| r["type"] == "thread").map(|r| r["steal_ns"].as_u64().unwrap_or(0)).sum();
        eprintln!("{tool}: [steal] {:.1} ms; the machine's steal + irq + softirq {:.1} ms", s as f64 / 1e6, machine as f64 / 1e6);
        if s > machine + tick_slack_ns() {
            errors.push(format!("{tool}: [steal] {s} ns, more than the machine's {machine} ns"));
        }
    }
    assert!(errors.is_empty(), "under load:\n{}", errors.join("\n"));
}

/// System-wide, every thread's steal summed is at most the machine's:
/// a thread running at the stop and blocked before its clock was read had
/// its sleep counted as steal (119 ms claimed against 40 ms).
#[test]
fn system_wide_steal_is_at_most_the_machines() {
    if skip() {
        return;
    }
    let d = util::scratch("underload-steal");
    let _hogs = Hogs::start();
    let mut worst = Vec::new();
    for round in 0..2 {
        let out = d.join(format!("sys{round}.jsonl"));
        let steal0 = machine_steal_ns();
        let st = Command::new(util::bin("offcputime")).args(["-d", "2", "-o"]).arg(&out).stderr(Stdio::inherit()).status().unwrap();
        let machine = machine_steal_ns() - steal0;
        assert!(st.success(), "offcputime failed");
        let recs = records(&out);
        let mut per_pid: HashMap<u64, u64> = HashMap::new();
        for r in recs.iter().filter(|r| r["type"] == "thread") {
            *per_pid.entry(u(&r["pid"])).or_default() += r["steal_ns"].as_u64().unwrap_or(0);
        }
        let all: u64 = per_pid.values().sum();
        let (top_pid, top) = per_pid.iter().max_by_key(|(_, s)| **s).map(|(p, s)| (*p, *s)).unwrap_or((0, 0));
        eprintln!(
            "round {round}: [steal] {:.1} ms in all, at most {:.1} ms in one process ({top_pid}); the machine's steal + irq + softirq {:.1} ms",
            all as f64 / 1e6,
            top as f64 / 1e6,
            machine as f64 / 1e6
        );
        if all > machine + tick_slack_ns() {
            worst.push(format!("round {round}: [steal] {all} ns in all, the machine's {machine} ns"));
        }
    }
    assert!(worst.is_empty(), "{}", worst.join("\n"));
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Each `--every` window's steal, system-wide and per process, is at most
/// the machine's over that window: /proc/stat read by the test every
/// 10 ms, from the last reading before the window's start to the first
/// after its end (a span that holds the window). The whole capture was
/// capped, the windows were not.
#[test]
fn every_windows_steal_is_at_most_the_machines() {
    if skip() {
        return;
    }
    let d = util::scratch("underload-every-steal");
    let _hogs = Hogs::start();
    let out = d.join("sys.jsonl");
    let sampler = util::poll(Duration::from_millis(10), || (monotonic_ns(), machine_steal_ns()));
    let st = Command::new(util::bin("offcputime")).args(["-d", "4", "--every", "1", "-o"]).arg(&out).stderr(Stdio::inherit()).status().unwrap();
    let readings = sampler.finish();
    assert!(st.success(), "offcputime failed");
    let mut errors = Vec::new();
    let mut n = 0;
    for i in 1.. {
        let p = PathBuf::from(format!("{}.{i}", out.display()));
        if !p.exists() {
            break;
        }
        n += 1;
        let recs = records(&p);
        let h = recs.iter().find(|r| r["type"] == "header").expect("a window's header");
        let (start, end) = (u(&h["start_ns"]), u(&h["end_ns"]));
        let before = readings.iter().rev().find(|(at, _)| *at <= start).expect("a reading before the window");
        let after = readings.iter().find(|(at, _)| *at >= end).expect("a reading after the window");
        let machine = after.1 - before.1;
        let mut per_pid: HashMap<u64, u64> = HashMap::new();
        for r in recs.iter().filter(|r| r["type"] == "thread") {
            *per_pid.entry(u(&r["pid"])).or_default() += r["steal_ns"].as_u64().unwrap_or(0);
        }
        let all: u64 = per_pid.values().sum();
        let top = per_pid.values().max().copied().unwrap_or(0);
        eprintln!(
            "window {i} ({:.0} ms): [steal] {:.1} ms in all, at most {:.1} ms in one process; the machine's steal + irq + softirq {:.1} ms",
            (end - start) as f64 / 1e6,
            all as f64 / 1e6,
            top as f64 / 1e6,
            machine as f64 / 1e6
        );
        if all > machine + tick_slack_ns() {
            errors.push(format!("window {i}: [steal] {all} ns in all, the machine's {machine} ns"));
        }
    }
    assert!(n >= 3, "{n} windows written, 4 s cut every 1 s");
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}
