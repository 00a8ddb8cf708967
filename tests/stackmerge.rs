//! Tests of stackmerge: every expected figure is computed here from the
//! input the test writes (or reads from ../shared/testdata), never copied
//! from the tool's output.

mod util;

use std::collections::BTreeMap;
use std::process::Command;

use util::{ok, run, scratch, testdata};
use wallclock_stream::{Frame, GpuInfo, Header, Kind, Record, Stack, State, StateNs, Stats, Thread};

const TOOL: &str = "stackmerge";

fn jsonl(recs: &[Record]) -> String {
    recs.iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect()
}

fn header(tool: &str, freq: Option<u64>) -> Record {
    let mut h = Header::new(tool, "test");
    h.pids = vec![100];
    h.start_ns = Some(1_000_000_000);
    h.end_ns = Some(3_000_000_000);
    h.freq_hz = freq;
    Record::Header(h)
}

fn thread(pid: u32, tid: u32, comm: &str, on_ns: Option<u64>) -> Record {
    let mut t = Thread::new(pid, tid, comm);
    t.on_ns = on_ns;
    Record::Thread(t)
}

fn stack(kind: Kind, pid: u32, tid: u32, comm: &str, frames: &[&str], ns: u64, count: u64) -> Stack {
    let mut s = Stack::new(kind, pid, tid, comm);
    s.frames = frames.iter().map(|f| Frame::named(*f)).collect();
    s.ns = ns;
    s.count = count;
    s
}

fn off(pid: u32, tid: u32, comm: &str, frames: &[&str], state: State, ns: u64) -> Record {
    let mut s = stack(Kind::Off, pid, tid, comm, frames, ns, 1);
    s.state = Some(state);
    Record::Stack(s)
}

fn on(pid: u32, tid: u32, comm: &str, frames: &[&str], samples: u64) -> Record {
    // ns as a sampler would write it at 99 Hz: stackmerge must replace it.
    Record::Stack(stack(Kind::On, pid, tid, comm, frames, samples * 10_101_010, samples))
}

fn parse_stream(text: &str) -> Vec<Record> {
    util::resolved(text).lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

fn stacks(recs: &[Record]) -> Vec<Stack> {
    recs.iter().filter_map(|r| if let Record::Stack(s) = r { Some(s.clone()) } else { None }).collect()
}

fn leaf(s: &Stack) -> &str {
    &s.frames.last().unwrap().func
}

/// Folded output as line -> value.
fn folded_map(text: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for l in text.lines() {
        let (k, v) = l.rsplit_once(' ').unwrap_or_else(|| panic!("not folded: {l}"));
        assert!(m.insert(k.to_string(), v.parse::<u64>().unwrap()).is_none(), "duplicate line {k}");
    }
    m
}

fn round_div(a: u128, b: u128) -> u64 {
    ((a + b / 2) / b) as u64
}

/// Two threads with exact on-CPU times and different sample counts.
fn two_thread_inputs() -> (String, String) {
    let offs = jsonl(&[
        header("offcputime", None),
        thread(100, 100, "app", Some(1_000_000_007)),
        thread(100, 101, "worker-1", Some(333_333_333)),
        off(100, 101, "worker-1", &["start", "worker", "pthread_mutex_lock", "futex_wait"], State::S, 900_000_000),
        off(100, 100, "app", &["main", "fsync"], State::D, 50_000_000),
        off(100, 100, "app", &["main", "compute"], State::R, 7_000),
    ]);
    let ons = jsonl(&[
        header("oncputime", Some(99)),
        on(100, 100, "app", &["main", "compute"], 3),
        on(100, 100, "app", &["main", "parse"], 4),
        on(100, 101, "worker-1", &["start", "worker", "hash"], 1),
        on(100, 101, "worker-1", &["start", "worker", "copy"], 2),
    ]);
    (offs, ons)
}

#[test]
fn on_cpu_scaled_to_each_threads_exact_time() {
    let (offs, ons) = two_thread_inputs();
    let dir = scratch("stackmerge-scale");
    let on_path = dir.join("on.json");
    std::fs::write(&on_path, &ons).unwrap();
    // Off-CPU stream through stdin, on-CPU as a file.
    let out = ok(TOOL, &["--on", on_path.to_str().unwrap()], offs.as_bytes());
    let recs = parse_stream(&out);
    let by_leaf: BTreeMap<String, u64> =
        stacks(&recs).iter().filter(|s| s.kind == Kind::On).map(|s| (leaf(s).to_string(), s.ns)).collect();
    let exp = |on: u128, n: u128, total: u128| round_div(on * n, total);
    assert_eq!(by_leaf["compute"], exp(1_000_000_007, 3, 7));
    assert_eq!(by_leaf["parse"], exp(1_000_000_007, 4, 7));
    assert_eq!(by_leaf["hash"], exp(333_333_333, 1, 3));
    assert_eq!(by_leaf["copy"], exp(333_333_333, 2, 3));
    // Each thread's widths add up to its exact on-CPU time (to the ns of rounding).
    assert!((by_leaf["compute"] + by_leaf["parse"]).abs_diff(1_000_000_007) <= 1);
    assert!((by_leaf["hash"] + by_leaf["copy"]).abs_diff(333_333_333) <= 1);
    // Merged header: window and pids of both inputs, tool stackmerge, freq of the on-CPU input.
    let Record::Header(h) = &recs[0] else { panic!("first record is not a header") };
    assert_eq!(
        (h.tool.as_str(), h.pids.as_slice(), h.start_ns, h.end_ns, h.freq_hz),
        ("stackmerge", &[100][..], Some(1_000_000_000), Some(3_000_000_000), Some(99))
    );
    // Threads merged per (pid, tid), role filled by the shared rule.
    let threads: Vec<&Thread> =
        recs.iter().filter_map(|r| if let Record::Thread(t) = r { Some(t) } else { None }).collect();
    assert_eq!(threads.len(), 2);
    assert_eq!(threads[0].role.as_deref(), Some("main"));
    assert_eq!(threads[1].role.as_deref(), Some("worker"));
    assert!(matches!(recs.last(), Some(Record::Stats(_))));
}

/// A thread's steal (the hypervisor's time on its vCPU, inside on_ns) is
/// not sampled: the samples share on_ns - steal_ns, and the steal is one
/// `[steal]` stack, once, even when two inputs each carry one.
#[test]
fn steal_is_its_own_stack_and_samples_share_the_rest() {
    let (on_ns, steal_ns) = (1_000_000_000u64, 250_000_000u64);
    let input = |with_samples: bool| {
        let mut t = Thread::new(100, 100, "app");
        (t.start_ns, t.end_ns, t.on_ns, t.steal_ns) = (Some(1_000_000_000), Some(3_000_000_000), Some(on_ns), Some(steal_ns));
        t.off_ns = Some(StateNs { s: 1_000_000_000, ..StateNs::default() });
        let mut steal = Stack::new(Kind::On, 100, 100, "app");
        steal.frames = vec![Frame::named("[steal]")];
        steal.ns = steal_ns;
        let mut recs = vec![header("offcputime", Some(99)), Record::Thread(t), Record::Stack(steal)];
        if with_samples {
            recs.push(on(100, 100, "app", &["main", "work"], 3));
            recs.push(on(100, 100, "app", &["main", "idle_spin"], 1));
        }
        jsonl(&recs)
    };
    let dir = scratch("stackmerge-steal");
    let second = dir.join("on.json");
    std::fs::write(&second, input(true)).unwrap();
    let out = ok(TOOL, &["--on", second.to_str().unwrap()], input(false).as_bytes());
    let recs = parse_stream(&out);
    let on: Vec<Stack> = stacks(&recs).into_iter().filter(|s| s.kind == Kind::On).collect();
    let width = |leaf_name: &str| on.iter().filter(|s| leaf(s) == leaf_name).map(|s| s.ns).sum::<u64>();
    assert_eq!(on.iter().filter(|s| leaf(s) == "[steal]").count(), 1, "one [steal] stack: {on:?}");
    assert_eq!(width("[steal]"), steal_ns);
    let ran = (on_ns - steal_ns) as u128;
    assert_eq!(width("work"), round_div(ran * 3, 4));
    assert_eq!(width("idle_spin"), round_div(ran, 4));
    // All on-CPU stacks together are the thread's on_ns.
    assert!(on.iter().map(|s| s.ns).sum::<u64>().abs_diff(on_ns) <= 1);
}

#[test]
fn without_on_ns_samples_use_the_frequency() {
    let ons = jsonl(&[header("oncputime", Some(99)), on(100, 100, "app", &["main", "compute"], 5)]);
    let out = ok(TOOL, &["--kind", "on"], ons.as_bytes());
    let s = &stacks(&parse_stream(&out))[0];
    assert_eq!(s.ns, round_div(5 * 1_000_000_000, 99));
    // Folded on-CPU input has no header: --freq (default 49).
    let dir = scratch("stackmerge-freq");
    let p = dir.join("p.folded");
    std::fs::write(&p, "app (100);main;spin 7\n").unwrap();
    let out = ok(TOOL, &["--on", p.to_str().unwrap(), "--folded", "--unit", "ns", "/dev/null"], b"");
    assert_eq!(out, format!("app (100);main;spin_[c] {}\n", round_div(7_000_000_000, 49)));
    let out = ok(TOOL, &["--on", p.to_str().unwrap(), "--folded", "--unit", "ns", "-F", "99", "/dev/null"], b"");
    assert_eq!(out, format!("app (100);main;spin_[c] {}\n", round_div(7_000_000_000, 99)));
}

#[test]
fn state_becomes_the_leaf_frame() {
    let recs = jsonl(&[
        header("offcputime", None),
        off(100, 100, "app", &["main", "a"], State::R, 1_000),
        off(100, 100, "app", &["main", "b"], State::S, 2_000),
        off(100, 100, "app", &["main", "c"], State::D, 3_000),
        off(100, 100, "app", &["main", "d"], State::Other, 4_000),
    ]);
    let out = ok(TOOL, &["--folded"], recs.as_bytes());
    let m = folded_map(&out);
    assert_eq!(m["app (100);main;a;[runnable]_[o]"], 1);
    assert_eq!(m["app (100);main;b;[sleep]_[o]"], 2);
    assert_eq!(m["app (100);main;c;[io]_[o]"], 3);
    assert_eq!(m["app (100);main;d;[other]_[o]"], 4);
    // In the stream too, and a second pass does not add a second leaf.
    let once = ok(TOOL, &[], recs.as_bytes());
    let twice = ok(TOOL, &[], once.as_bytes());
    let leaves: Vec<String> = stacks(&parse_stream(&twice))
        .iter()
        .map(|s| s.frames.iter().map(|f| f.func.clone()).collect::<Vec<_>>().join(";"))
        .collect();
    assert_eq!(leaves, ["main;a;[runnable]", "main;b;[sleep]", "main;c;[io]", "main;d;[other]"]);
}

#[test]
fn folded_values_sum_in_ns_then_round_once() {
    let recs = jsonl(&[
        header("offcputime", None),
        off(100, 100, "app", &["main", "poll"], State::S, 1_499),
        off(100, 100, "app", &["main", "poll"], State::S, 1),
        off(100, 100, "app", &["main", "tiny"], State::S, 400),
        off(100, 100, "app", &["main", "ms"], State::S, 2_500_000),
    ]);
    let us = folded_map(&ok(TOOL, &["--folded"], recs.as_bytes()));
    // 1499 + 1 = 1500 ns -> 2 us (rounding each first would give 1 + 0).
    assert_eq!(us["app (100);main;poll;[sleep]_[o]"], round_div(1_499 + 1, 1_000));
    // Under 1 us: still there, rounded.
    assert_eq!(us["app (100);main;tiny;[sleep]_[o]"], round_div(400, 1_000));
    let ns = folded_map(&ok(TOOL, &["--folded", "--unit", "ns"], recs.as_bytes()));
    assert_eq!(ns["app (100);main;poll;[sleep]_[o]"], 1_500);
    assert_eq!(ns["app (100);main;tiny;[sleep]_[o]"], 400);
    let ms = folded_map(&ok(TOOL, &["--folded", "--unit", "ms"], recs.as_bytes()));
    assert_eq!(ms["app (100);main;ms;[sleep]_[o]"], 3);
    // The stream keeps exact ns.
    let total: u64 = stacks(&parse_stream(&ok(TOOL, &[], recs.as_bytes()))).iter().map(|s| s.ns).sum();
    assert_eq!(total, 1_499 + 1 + 400 + 2_500_000);
}

#[test]
fn filters_and_roots() {
    let (offs, ons) = two_thread_inputs();
    let dir = scratch("stackmerge-filters");
    let on_path = dir.join("on.json");
    std::fs::write(&on_path, &ons).unwrap();
    let on_arg = on_path.to_str().unwrap();
    let lines = |args: &[&str]| folded_map(&ok(TOOL, &[&["--folded", "--on", on_arg], args].concat(), offs.as_bytes()));

    // Default root: the process name (comm of the main thread), even for a worker's stack.
    let all = lines(&[]);
    assert_eq!(all.len(), 7, "{all:?}");
    assert!(all.keys().all(|k| k.starts_with("app (100);")), "{all:?}");
    assert!(all.contains_key("app (100);start;worker;pthread_mutex_lock;futex_wait;[sleep]_[o]"));
    // --per-thread: comm-TID.
    let per = lines(&["--per-thread"]);
    assert!(per.contains_key("worker-1-101;start;worker;pthread_mutex_lock;futex_wait;[sleep]_[o]"), "{per:?}");
    assert!(per.contains_key("app-100;main;fsync;[io]_[o]"));
    // --tid keeps one thread; --kind one kind; --pid a process.
    let w = lines(&["--tid", "101"]);
    assert_eq!(w.len(), 3);
    assert!(w.keys().all(|k| k.contains(";start;worker;")));
    let offonly = lines(&["--kind", "off"]);
    assert_eq!(offonly.len(), 3);
    assert!(offonly.keys().all(|k| k.ends_with("_[o]")));
    let ononly = lines(&["--kind", "on", "--tid", "100"]);
    assert_eq!(ononly.keys().cloned().collect::<Vec<_>>(), ["app (100);main;compute_[c]", "app (100);main;parse_[c]"]);
    assert!(lines(&["--pid", "999"]).is_empty());
    // Filters apply after scaling: a thread's on-CPU widths do not change.
    assert_eq!(ononly["app (100);main;compute_[c]"], all["app (100);main;compute_[c]"]);
}

#[test]
fn gpu_stacks_under_their_launch_and_outside_thread_time() {
    let (offs, _) = two_thread_inputs();
    // The kernel's name is the GPU leaf: it goes under the launch stack.
    let mut g = stack(Kind::Gpu, 100, 100, "app", &["main", "launch_step", "cudaLaunchKernel"], 7_000_000, 3);
    g.gpu = Some(GpuInfo {
        activity: "kernel".into(),
        device: Some(0),
        stream: Some(7),
        launch_delay_ns: Some(30_000),
        name: Some("gemm_kernel".into()),
    });
    let gpu = jsonl(&[header("gputrace", None), Record::Stack(g)]);
    let dir = scratch("stackmerge-gpu");
    let gp = dir.join("gpu.json");
    std::fs::write(&gp, gpu).unwrap();
    let gp = gp.to_str().unwrap();
    let m = folded_map(&ok(TOOL, &["--folded", "--gpu-from", gp], offs.as_bytes()));
    assert_eq!(m["app (100);main;launch_step;cudaLaunchKernel;gemm_kernel_[g]"], 7_000);
    let roots = folded_map(&ok(TOOL, &["--folded", "--gpu-roots", "--gpu-from", gp], offs.as_bytes()));
    assert_eq!(roots["[gpu 0 stream 7];main;launch_step;cudaLaunchKernel;gemm_kernel_[g]"], 7_000);
    // The threads' accounting is what the capture said: GPU time added nowhere.
    let new = ok(TOOL, &["--gpu-from", gp], offs.as_bytes());
    // `--gpu FILE`, the old spelling (a switch in wallclock), reads the
    // same input and warns once.
    let old = run(TOOL, &["--gpu", gp], offs.as_bytes());
    let err = String::from_utf8_lossy(&old.stderr);
    assert!(old.status.success() && old.stdout == new.as_bytes(), "{err}");
    assert_eq!(err.lines().filter(|l| l.contains("warning")).collect::<Vec<_>>(), ["stackmerge: warning: --gpu is an old spelling of --gpu-from, which means the same; --gpu goes in the next release"]);
    let recs = parse_stream(&new);
    for r in &recs {
        if let Record::Thread(t) = r {
            let want = if t.tid == 100 { 1_000_000_007 } else { 333_333_333 };
            assert_eq!(t.on_ns, Some(want));
            assert_eq!(t.off_ns, None);
        }
    }
}

/// A folded file's values summed per distinct stack (its lines may repeat a stack).
fn folded_values(path: &std::path::Path) -> Vec<u64> {
    let mut per_stack: BTreeMap<String, u64> = BTreeMap::new();
    for l in std::fs::read_to_string(path).unwrap().lines().filter(|l| !l.trim().is_empty()) {
        let (stack, v) = l.rsplit_once(' ').unwrap();
        *per_stack.entry(stack.to_string()).or_insert(0) += v.trim().parse::<u64>().unwrap();
    }
    per_stack.into_values().collect()
}

#[test]
fn bcc_offcputime_and_profile_merged() {
    let (Some(offp), Some(onp)) = (testdata("bcc/offcputime-f-mixed.folded"), testdata("bcc/profile-f-mixed.folded"))
    else {
        return;
    };
    let off_us = folded_values(&offp);
    let on_samples = folded_values(&onp);
    let want_off_ns: u64 = off_us.iter().map(|v| v * 1_000).sum();
    // A stack's samples are summed, then become ns at 49 Hz, rounded once.
    let want_on_ns: u64 = on_samples.iter().map(|n| round_div(*n as u128 * 1_000_000_000, 49)).sum();
    let onarg = onp.to_str().unwrap();
    let offtext = std::fs::read(&offp).unwrap();

    let by_file = ok(TOOL, &[offp.to_str().unwrap(), "--on", onarg, "--folded", "--unit", "ns"], b"");
    let by_stdin = ok(TOOL, &["--on", onarg, "--folded", "--unit", "ns"], &offtext);
    assert_eq!(by_file, by_stdin);
    let m = folded_map(&by_file);
    let sum = |marker: &str| m.iter().filter(|(k, _)| k.ends_with(marker)).map(|(_, v)| *v).sum::<u64>();
    assert_eq!(sum("_[o]"), want_off_ns);
    assert_eq!(sum("_[c]"), want_on_ns);
    assert_eq!(m.len(), m.keys().filter(|k| k.ends_with("_[o]") || k.ends_with("_[c]")).count());
    // The default us output: the same figures rounded once per line.
    let us = ok(TOOL, &[offp.to_str().unwrap(), "--on", onarg, "--folded"], b"");
    let mu = folded_map(&us);
    for (k, ns) in &m {
        assert_eq!(mu[k], round_div(*ns as u128, 1_000), "{k}");
    }
    util::golden("stackmerge/bcc-mixed.folded", &us);
}

#[test]
fn stream_output_golden() {
    let (offs, ons) = two_thread_inputs();
    let dir = scratch("stackmerge-golden");
    let on_path = dir.join("on.json");
    std::fs::write(&on_path, &ons).unwrap();
    let out = ok(TOOL, &["--on", on_path.to_str().unwrap()], offs.as_bytes());
    // The same records as before the stack table (1.3), frames written out.
    util::golden("stackmerge/two-threads.jsonl", &util::resolved(&out));
    // stackmerge's own output merges to itself: nothing scaled twice, no second leaf.
    assert_eq!(ok(TOOL, &[], out.as_bytes()), out);
    // The same through a file argument.
    let offp = dir.join("off.json");
    std::fs::write(&offp, &offs).unwrap();
    assert_eq!(ok(TOOL, &[offp.to_str().unwrap(), "--on", on_path.to_str().unwrap()], b""), out);
}

/// An unsymbolized stack (raw addresses, as `oncputime` writes) is named
/// in-process exactly as `stacksym | stackmerge` would name it, and what
/// cannot be named says why once on stderr and is counted per module.
#[test]
fn unsymbolized_stacks_named_as_stacksym_would() {
    const PID: u32 = 3_999_999;
    let mut s = Stack::new(Kind::Off, PID, PID, "app");
    s.state = Some(State::S);
    // No maps record, no such process: unknown.
    s.ustack = vec![0x401000, 0x401234];
    s.kstack = vec![0xffffffff81000010];
    s.ns = 5_000;
    s.count = 2;
    let mut t = s.clone();
    t.ustack = vec![0x401000, 0x401300];
    let recs = jsonl(&[header("offcputime", None), Record::Stack(s), Record::Stack(t)]);
    let out = util::run(TOOL, &["--folded", "--unit", "ns"], recs.as_bytes());
    assert!(out.status.success());
    let direct = String::from_utf8(out.stdout).unwrap();
    let via = util::ok("stacksym", &["--no-live"], recs.as_bytes());
    assert_eq!(direct, ok(TOOL, &["--folded", "--unit", "ns"], via.as_bytes()));
    assert!(direct.starts_with("app (3999999);[unknown]+0x401000;[unknown]+0x401234;"), "{direct}");
    assert!(!direct.contains(";0x"), "{direct}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "one line for three unnamed addresses: {err}");
    assert!(err.contains("[unknown]+0x...: pid 3999999: not running and no maps record"), "{err}");
    // The stream keeps the addresses beside the frames; the trailer counts
    // the unnamed module: 3 distinct addresses, both stacks' time.
    let recs = parse_stream(&ok(TOOL, &[], recs.as_bytes()));
    let st = &stacks(&recs)[0];
    assert_eq!((st.ustack.len(), st.kstack.len()), (2, 1));
    assert_eq!(st.frames.last().unwrap().func, "[sleep]");
    let Some(Record::Stats(stats)) = recs.last() else { panic!("no trailer") };
    assert_eq!(stats.counts.get("unnamed_addrs:[unknown]"), Some(&3), "{stats:?}");
    assert_eq!(stats.counts.get("unnamed_ns:[unknown]"), Some(&10_000));
    assert_eq!(stats.counts.get("unnamed_count:[unknown]"), Some(&4));
}

#[test]
fn bad_line_is_named_and_earlier_records_written() {
    let good = jsonl(&[header("offcputime", None), off(100, 100, "app", &["main", "a"], State::S, 3_000)]);
    let input = format!("{good}this is not a stack\n");
    let out = run(TOOL, &["--folded"], input.as_bytes());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 3"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("stackmerge: error:"), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "app (100);main;a;[sleep]_[o] 3\n");
    // A missing file is named too.
    let out = run(TOOL, &["/nonexistent/off.json"], b"");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/off.json"));
}

#[test]
fn empty_input_and_help() {
    let recs = parse_stream(&ok(TOOL, &[], b""));
    assert!(matches!(recs.first(), Some(Record::Header(_))));
    assert!(matches!(recs.last(), Some(Record::Stats(Stats { .. }))));
    assert_eq!(ok(TOOL, &["--folded"], b""), "");
    let help = ok(TOOL, &["--help"], b"");
    assert!(help.contains("EXAMPLES:") && help.contains("--per-thread"), "{help}");
}

#[test]
fn head_closes_the_pipe_quietly() {
    let mut input = String::new();
    for i in 0..200_000 {
        input.push_str(&format!("app (100);main;f{i} {}\n", i + 1));
    }
    let (first, status, err) = util::first_line_then_close(TOOL, &["--folded"], input.into_bytes());
    assert!(first.starts_with("app (100);main;f") && first.contains("_[o] "), "{first}");
    assert!(status.success(), "{status}: {err}");
    assert!(err.is_empty(), "{err}");
}

/// `perf script` output this test makes itself: each stack weighs the sum
/// of its samples' periods (ns of cpu-clock), which must come out unchanged.
#[test]
fn perf_script_recorded_here() {
    if util::skip_without_root("stackmerge perf") {
        return;
    }
    let have_perf = Command::new("perf").arg("--version").output().is_ok_and(|o| o.status.success());
    if !have_perf && util::missing("perf is not installed", "scripts/setup installs it (linux-perf)", "WALLCLOCK_SKIP_PERF") {
        return;
    }
    let dir = scratch("stackmerge-perf");
    let data = dir.join("perf.data");
    let rec = Command::new("perf")
        .args([
            "record",
            "-F",
            "99",
            "-g",
            "-o",
            data.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done",
        ])
        .output()
        .unwrap();
    assert!(rec.status.success(), "perf record: {}", String::from_utf8_lossy(&rec.stderr));
    let script = Command::new("perf").args(["script", "-i", data.to_str().unwrap()]).output().unwrap();
    assert!(script.status.success());
    let text = String::from_utf8(script.stdout).unwrap();
    // Sample header lines: `comm pid time: period cpu-clock...:`.
    let periods: Vec<u64> = text
        .lines()
        .filter(|l| !l.starts_with(char::is_whitespace) && l.contains("cpu-clock"))
        .map(|l| {
            let before = l.split("cpu-clock").next().unwrap();
            before.split_whitespace().last().unwrap().parse::<u64>().unwrap()
        })
        .collect();
    assert!(periods.len() >= 5, "too few samples: {}", periods.len());
    let want: u64 = periods.iter().sum();
    let p = dir.join("perf.txt");
    std::fs::write(&p, &text).unwrap();
    let by_file = ok(TOOL, &["/dev/null", "--on", p.to_str().unwrap(), "--folded", "--unit", "ns"], b"");
    let by_stdin = ok(TOOL, &["--on", "-", "--folded", "--unit", "ns"], text.as_bytes());
    assert_eq!(by_file, by_stdin);
    let m = folded_map(&by_file);
    assert_eq!(m.values().sum::<u64>(), want);
    assert!(m.keys().all(|k| k.ends_with("_[c]")), "{m:?}");
    // Merging the merged stream again changes nothing: periods are not samples.
    let stream = ok(TOOL, &["/dev/null", "--on", p.to_str().unwrap()], b"");
    let again = ok(TOOL, &["--folded", "--unit", "ns"], stream.as_bytes());
    assert_eq!(again, by_file);
    // Rooted at the command (perf may catch it as perf-exec before the exec).
    let sh: u64 = m.iter().filter(|(k, _)| k.starts_with("sh;")).map(|(_, v)| v).sum();
    assert!(sh * 2 > want, "{m:?}");
}

#[test]
fn inputs_on_different_clocks_are_refused() {
    let (offs, _) = two_thread_inputs();
    let mut h = Header::new("gputrace", "test");
    h.clock = "realtime".into();
    let dir = scratch("stackmerge-clock");
    let gp = dir.join("gpu.json");
    std::fs::write(&gp, jsonl(&[Record::Header(h)])).unwrap();
    let out = run(TOOL, &["--gpu-from", gp.to_str().unwrap()], offs.as_bytes());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("gpu.json") && err.contains("realtime"), "{err}");
}

/// Two capture tools start a few ms apart: the thread's life is the one
/// its exact on/off accounting was measured over, not the union.
#[test]
fn thread_life_comes_from_the_exact_accounting() {
    let mut exact = Thread::new(100, 101, "w");
    (exact.start_ns, exact.end_ns, exact.on_ns) = (Some(1_000), Some(2_001_000), Some(600_000));
    exact.off_ns = Some(StateNs { s: 1_400_000, ..Default::default() });
    let mut sampled = Thread::new(100, 101, "w");
    (sampled.start_ns, sampled.end_ns, sampled.on_ns, sampled.samples) =
        (Some(31_000), Some(2_031_000), Some(590_000), Some(3));
    let offs = jsonl(&[header("offcputime", None), Record::Thread(exact.clone())]);
    let ons = jsonl(&[header("oncputime", Some(49)), Record::Thread(sampled), on(100, 101, "w", &["main", "x"], 3)]);
    let dir = scratch("stackmerge-life");
    let p = dir.join("on.json");
    std::fs::write(&p, ons).unwrap();
    let recs = parse_stream(&ok(TOOL, &["--on", p.to_str().unwrap()], offs.as_bytes()));
    let t = recs.iter().find_map(|r| if let Record::Thread(t) = r { Some(t.clone()) } else { None }).unwrap();
    assert_eq!((t.start_ns, t.end_ns, t.on_ns, t.off_ns), (exact.start_ns, exact.end_ns, exact.on_ns, exact.off_ns));
    assert_eq!(t.samples, Some(3));
    // All three samples of the thread: its whole exact on-CPU time.
    assert_eq!(stacks(&recs)[0].ns, 600_000);
}
