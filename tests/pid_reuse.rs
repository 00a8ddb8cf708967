//! A pid used again within one capture: two processes, not one.
//!
//! tests/programs/pidreuse/reuse.c runs a process (comm `reuse_first`)
//! that sleeps in `first_sleeper`, reaps it, then forks under the same
//! pid (ns_last_pid) a second one (`reuse_second`, `second_sleeper`);
//! each prints its sleep by its own clock. One offcputime capture of a
//! cgroup holding both must keep them apart through stacksym and
//! stackmerge: each under its own root with its own name, each sleeping
//! function with the time its process slept. Before `pgen`, both were
//! one process `reuse_second (PID)` holding both sleeps.

mod util;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// What reuse printed: (name, pid, slept ns by its own clock).
fn truths(stdout: &str) -> Vec<(String, u64, u64)> {
    stdout
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| f[i].parse::<u64>().unwrap_or_else(|e| panic!("bad line {l}: {e}"));
            (f[0].to_string(), n(1), n(3) - n(2))
        })
        .collect()
}

/// Folded lines (values in ns) whose text holds every one of `parts` and
/// none of `not`, summed.
fn folded_ns(folded: &str, parts: &[&str], not: &[&str]) -> u64 {
    folded
        .lines()
        .filter(|l| parts.iter().all(|p| l.contains(p)) && !not.iter().any(|p| l.contains(p)))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum()
}

/// One live test at a time: each sets the machine's next pid
/// (ns_last_pid) to take its first process's pid again, and a thread the
/// other test's tools start meanwhile can take that pid instead and keep
/// it (a run of this binary: "reuse failed" once, both tests at once).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn capture(dir: &Path, gap_ms: u32) -> (Vec<(String, u64, u64)>, PathBuf) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let root = util::cgroup::cgroup2_mount().expect("no cgroup2 file system is mounted: this test needs one");
    let cg = root.join(format!("wallclock-pidreuse-test-{}-{gap_ms}", std::process::id()));
    std::fs::create_dir(&cg).unwrap_or_else(|e| panic!("mkdir {}: {e}", cg.display()));
    let _guard = util::cgroup::TempCgroup(cg.clone(), root);
    let reuse = util::build_c("tests/programs/pidreuse/reuse.c", dir, "reuse");
    let (ready, out_file) = (dir.join("ready"), dir.join("out.jsonl"));
    let t0 = Instant::now();
    // Long enough for the two sleeps, the gap and a loaded machine's
    // slow start of the program; the capture ends on its own.
    let mut tool = Command::new(util::bin("offcputime"))
        .arg("--cgroup")
        .arg(&cg)
        .args(["-d", "6", "--ready-file"])
        .arg(&ready)
        .arg("-o")
        .arg(&out_file)
        .spawn()
        .unwrap();
    while !ready.exists() {
        assert!(t0.elapsed() < Duration::from_secs(60), "offcputime never became ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = Command::new(&reuse)
        .arg(cg.join("cgroup.procs"))
        .args([&gap_ms.to_string(), "300"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(out.status.success(), "reuse failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(tool.wait().unwrap().success(), "offcputime --cgroup failed");
    (truths(&String::from_utf8_lossy(&out.stdout)), out_file)
}

/// 2.5 s between the first process's exit and the second's start: the
/// capture has moved the first one's thread out of its BPF map (it does
/// once a second) when the second one comes.
#[test]
fn a_reused_pid_is_two_processes_in_the_folded_output() {
    two_processes("pid-reuse", 2500);
}

/// The second process forked as soon as the first is reaped: its thread
/// finds the first one's final entry still in the BPF map (see
/// thread_reborn in bpf/capture.bpf.h). Before, its switches were dropped
/// until user space moved that entry out, up to a second later: the
/// second process had no time, or only what came after.
#[test]
fn a_pid_reused_at_once_is_two_processes() {
    two_processes("pid-reuse-now", 0);
}

fn two_processes(name: &str, gap_ms: u32) {
    if util::skip_without_root("pid reuse") {
        return;
    }
    let dir = util::scratch(name);
    let (truth, out_file) = capture(&dir, gap_ms);
    assert_eq!(truth.len(), 2, "both processes report: {truth:?}");
    let (first, second) = (&truth[0], &truth[1]);
    assert_eq!((first.0.as_str(), second.0.as_str()), ("reuse_first", "reuse_second"));
    assert_eq!(first.1, second.1, "the second process has the first one's pid");
    let pid = first.1;

    // The stream: two thread records of that pid, the second `pgen` 1.
    let text = std::fs::read_to_string(&out_file).unwrap();
    let recs: Vec<Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let mut threads: Vec<(&str, u64)> = recs
        .iter()
        .filter(|r| r["type"] == "thread" && r["pid"] == pid)
        .map(|r| (r["comm"].as_str().unwrap_or(""), r["pgen"].as_u64().unwrap_or(0)))
        .collect();
    threads.sort();
    assert_eq!(threads, [("reuse_first", 0), ("reuse_second", 1)], "the thread records of pid {pid}");

    let sym = util::run("stacksym", &[out_file.to_str().unwrap()], b"");
    assert!(sym.status.success(), "stacksym failed: {}", String::from_utf8_lossy(&sym.stderr));
    let folded = util::ok("stackmerge", &["--folded", "--unit", "ns"], &sym.stdout);
    let (root_a, root_b) = (format!("reuse_first ({pid});"), format!("reuse_second ({pid}) (2nd);"));
    for (root, own, other, (name, _, slept)) in [(&root_a, "first_sleeper", "second_sleeper", first), (&root_b, "second_sleeper", "first_sleeper", second)] {
        // Everything under the function but its report (after its clock's
        // second read): the sleep, the wait for a CPU after it, and a
        // preemption between a clock read and the sleep, on or off CPU;
        // and of it the sleep itself, from the switch-out in nanosleep to
        // the timer's wake-up.
        let got = folded_ns(&folded, &[root, own], &["say"]);
        let asleep = folded_ns(&folded, &[root, own, "[sleep]"], &["say"]);
        eprintln!("{name}: {got} ns under {own} in the profile, {asleep} ns of it asleep; {slept} ns between its own clock reads");
        // Blocks and on-CPU time are measured switch to switch: all the
        // program timed is there (but the clock reads themselves), and
        // more only by a preemption just outside them (a loaded machine's:
        // 6 ms once in a run of the suite). The sleep lies between the
        // reads, and lasts the 300 ms asked for.
        assert!(got + 5_000_000 >= *slept && got <= slept + 100_000_000, "{name}: {got} ns under {root}..{own}, its clock reads {slept} ns apart:\n{folded}");
        assert!(asleep <= *slept && asleep + 2_000_000 >= 300_000_000, "{name}: {asleep} ns asleep under {root}..{own}, its clock reads {slept} ns apart:\n{folded}");
        assert_eq!(folded_ns(&folded, &[root, other], &[]), 0, "{name}'s root holds the other process's {other}:\n{folded}");
    }
    // No line of that pid under any other root.
    let pid_roots: std::collections::BTreeSet<&str> =
        folded.lines().filter_map(|l| l.split(';').next()).filter(|r| r.contains(&format!("({pid})"))).collect();
    assert_eq!(pid_roots.len(), 2, "two roots for pid {pid}: {pid_roots:?}");

    // wcreport: two processes of that pid, each with its name and its
    // own sleep in its off-CPU time (S, and R after the wake-up).
    let report: Value = serde_json::from_str(&util::ok("wcreport", &["--json"], &sym.stdout)).unwrap();
    let procs: Vec<&Value> = report["processes"].as_array().unwrap().iter().filter(|p| p["pid"] == pid).collect();
    assert_eq!(procs.len(), 2, "two processes of pid {pid} in the report: {procs:?}");
    for (name, pgen, slept) in [(&first.0, 0, first.2), (&second.0, 1, second.2)] {
        let p = procs.iter().find(|p| p["pgen"].as_u64().unwrap_or(0) == pgen).unwrap_or_else(|| panic!("no process of pid {pid}, pgen {pgen}: {procs:?}"));
        assert_eq!(p["comm"], name.as_str(), "{p}");
        let (s, r) = (p["off_ns"]["S"].as_u64().unwrap(), p["off_ns"]["R"].as_u64().unwrap());
        let on = p["on_ns"].as_u64().unwrap();
        // Its life is the sleep and a little around it (fork to the first
        // clock read, the report after the second): all its clock reads
        // timed, and asleep only in the nap (the waits for a CPU around it
        // are R, as long as the machine makes them).
        assert!(s + r + on + 5_000_000 >= slept && s <= slept && s + 2_000_000 >= 300_000_000, "{name}: S {s} ns, R {r} ns, on-CPU {on} ns in the report, its clock reads {slept} ns apart");
    }
}

/// Without root or a capture: a hand-made stream of two processes of one
/// pid (the second `pgen` 1) is two processes in stackmerge and wcreport,
/// and the same stream without `pgen` is one, as before.
#[test]
fn pgen_keeps_two_processes_of_one_pid_apart() {
    let thread = |comm: &str, pgen: &str, s: u64| {
        format!(r#"{{"type":"thread","pid":77,"tid":77,"comm":"{comm}","start_ns":0,"end_ns":{s},"on_ns":0,"off_ns":{{"R":0,"S":{s},"D":0,"other":0}}{pgen}}}"#)
    };
    let stack = |comm: &str, f: &str, pgen: &str, s: u64| {
        format!(r#"{{"type":"stack","kind":"off","state":"S","pid":77,"tid":77,"comm":"{comm}","frames":[{{"func":"main"}},{{"func":"{f}"}}],"ns":{s},"count":1{pgen}}}"#)
    };
    let header = r#"{"type":"header","format":"wallclock","version":"1.4","tool":"offcputime","tool_version":"0","clock":"monotonic","start_ns":0,"end_ns":1000}"#;
    let stream = |pgen: &str| {
        [header.to_string(), thread("one", "", 300), stack("one", "f_one", "", 300), thread("two", pgen, 500), stack("two", "f_two", pgen, 500)].join("\n")
    };
    let folded = util::ok("stackmerge", &["--folded", "--unit", "ns"], stream(r#","pgen":1"#).as_bytes());
    assert_eq!(folded, "one (77);main;f_one;[sleep]_[o] 300\ntwo (77) (2nd);main;f_two;[sleep]_[o] 500\n");
    let report: Value = serde_json::from_str(&util::ok("wcreport", &["--json"], stream(r#","pgen":1"#).as_bytes())).unwrap();
    let procs: Vec<(String, u64, u64)> = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["comm"].as_str().unwrap().to_string(), p["pgen"].as_u64().unwrap_or(0), p["off_ns"]["S"].as_u64().unwrap()))
        .collect();
    assert_eq!(procs, [("two".to_string(), 1, 500), ("one".to_string(), 0, 300)]);
    // flame: one root box per process, the later one named so.
    let dir = util::scratch("pid-reuse-flame");
    let svg = dir.join("g.svg");
    let out = util::run("flame", &["-o", svg.to_str().unwrap()], stream(r#","pgen":1"#).as_bytes());
    assert!(out.status.success(), "flame: {}", String::from_utf8_lossy(&out.stderr));
    let svg = std::fs::read_to_string(&svg).unwrap();
    for root in ["<title>one (77) (", "<title>two (77) (2nd) ("] {
        assert!(svg.contains(root), "no {root} in the graph");
    }
    // The binary framing keeps it too.
    let bin = util::run_cmd(std::process::Command::new(util::bin("stackmerge")).env("WALLCLOCK_STREAM_FORMAT", "bincode"), stream(r#","pgen":1"#).as_bytes());
    assert!(bin.status.success(), "{}", String::from_utf8_lossy(&bin.stderr));
    assert_eq!(util::ok("stackmerge", &["--folded", "--unit", "ns"], &bin.stdout), folded);
    // Without pgen: one process, as streams were read before.
    let merged = util::ok("stackmerge", &["--folded", "--unit", "ns"], stream("").as_bytes());
    let roots: std::collections::BTreeSet<&str> = merged.lines().filter_map(|l| l.split(';').next()).collect();
    assert_eq!(roots.len(), 1, "{merged}");
}

/// The address of `func` in the non-PIE executable `bin` (nm).
fn address_of(bin: &Path, func: &str) -> u64 {
    let out = Command::new("nm").arg(bin).output().expect("nm (binutils)");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.ends_with(&format!(" T {func}"))).unwrap_or_else(|| panic!("{func} not in nm {}:\n{text}", bin.display()));
    u64::from_str_radix(line.split_whitespace().next().unwrap(), 16).unwrap()
}

/// Each process of a reused pid is named against its own mappings: two
/// non-PIE programs whose functions sit at the same address, one `maps`
/// record each under one pid (the second `pgen` 1). Without `pgen` the
/// later record won and both stacks were named from the second binary.
#[test]
fn each_process_of_a_reused_pid_is_named_from_its_own_maps() {
    let dir = util::scratch("pid-reuse-maps");
    let mut bins = Vec::new();
    for (name, body) in [("one", "x * 3 + 1"), ("two", "x * 5 + 2")] {
        let src = dir.join(format!("{name}.c"));
        std::fs::write(&src, format!("int {name}_func(int x) {{ return {body}; }}\nint main(int c, char **v) {{ return {name}_func(c); }}\n")).unwrap();
        bins.push(util::build_c_with(src.to_str().unwrap(), &dir, name, &["-O1", "-no-pie"]));
    }
    let (a, b) = (address_of(&bins[0], "one_func"), address_of(&bins[1], "two_func"));
    assert_eq!(a, b, "the two functions at one address (the test's premise)");
    let maps = |bin: &Path, pgen: &str| {
        format!(r#"{{"type":"maps","pid":77,"maps":[{{"start":4194304,"end":4259840,"offset":0,"path":"{}"}}]{pgen}}}"#, bin.display())
    };
    let stack = |comm: &str, pgen: &str| format!(r#"{{"type":"stack","kind":"off","state":"S","pid":77,"tid":77,"comm":"{comm}","ustack":[{a}],"ns":100,"count":1{pgen}}}"#);
    let header = r#"{"type":"header","format":"wallclock","version":"1.4","tool":"offcputime","tool_version":"0","clock":"monotonic","start_ns":0,"end_ns":1000}"#;
    let pg = r#","pgen":1"#;
    let stream = [header.to_string(), maps(&bins[0], ""), maps(&bins[1], pg), stack("one", ""), stack("two", pg)].join("\n");
    let sym = util::ok("stacksym", &[], stream.as_bytes());
    let folded = util::ok("stackmerge", &["--folded", "--unit", "ns"], sym.as_bytes());
    assert_eq!(folded, "one (77);one_func;[sleep]_[o] 100\ntwo (77) (2nd);two_func;[sleep]_[o] 100\n");
}
