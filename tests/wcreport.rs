//! Tests of wcreport: the figures expected are computed here from the
//! records the test writes, not read back from the tool.

mod util;

use std::process::Command;

use serde_json::Value;
use util::{ok, run, scratch, testdata};
use wallclock_stream::units::human_ns;
use wallclock_stream::{Frame, GpuInfo, Header, Kind, Record, Stack, State, StateNs, Stats, Thread};

const TOOL: &str = "wcreport";
const START: u64 = 1_000_000_000;
const END: u64 = 3_000_000_000;

fn jsonl(recs: &[Record]) -> String {
    recs.iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect()
}

fn thread(tid: u32, comm: &str, life: Option<(u64, u64)>, on: u64, off: StateNs) -> Thread {
    let mut t = Thread::new(200, tid, comm);
    if let Some((s, e)) = life {
        t.start_ns = Some(s);
        t.end_ns = Some(e);
    }
    t.on_ns = Some(on);
    t.off_ns = Some(off);
    t
}

fn stack(kind: Kind, state: Option<State>, tid: u32, comm: &str, frames: &[&str], ns: u64) -> Record {
    let mut s = Stack::new(kind, 200, tid, comm);
    s.state = state;
    s.frames = frames.iter().map(|f| Frame::named(*f)).collect();
    s.ns = ns;
    s.count = 1;
    Record::Stack(s)
}

fn on_stack(tid: u32, comm: &str, frames: &[&str], ns: u64, samples: u64) -> Record {
    let Record::Stack(mut s) = stack(Kind::On, None, tid, comm, frames, ns) else { unreachable!() };
    s.count = samples;
    Record::Stack(s)
}

fn off_ns(r: u64, s: u64, d: u64) -> StateNs {
    StateNs { r, s, d, other: 0 }
}

/// A process of three threads: a CPU-bound main, a worker waiting on a
/// mutex, and a short-lived I/O thread whose accounting does not cover
/// its life (coverage 80%). Main launches GPU work.
fn threads() -> Vec<Thread> {
    vec![
        thread(200, "app", None, 1_700_000_000, off_ns(100_000_000, 150_000_000, 50_000_000)),
        thread(201, "worker-1", None, 100_000_000, off_ns(0, 1_800_000_000, 100_000_000)),
        thread(202, "io-3", Some((1_500_000_000, 2_500_000_000)), 200_000_000, off_ns(0, 100_000_000, 500_000_000)),
    ]
}

fn input(only_tid: Option<u32>) -> String {
    let mut h = Header::new("stackmerge", "test");
    h.pids = vec![200];
    h.start_ns = Some(START);
    h.end_ns = Some(END);
    h.lost.insert("ringbuf_drops".into(), 2);
    let mut recs = vec![Record::Header(h)];
    recs.extend(threads().into_iter().map(Record::Thread));
    let mut gpu = Stack::new(Kind::Gpu, 200, 200, "app");
    gpu.frames = vec![Frame::named("main"), Frame::named("launch")];
    gpu.gpu = Some(GpuInfo {
        activity: "kernel".into(),
        device: Some(0),
        stream: Some(1),
        name: Some("gemm".into()),
        ..Default::default()
    });
    gpu.ns = 400_000_000;
    gpu.count = 4;
    recs.extend([
        // 12 and 5 samples of main's exact 1.7 s on-CPU: 1.2 s and 0.5 s.
        on_stack(200, "app", &["main", "compute"], 1_200_000_000, 12),
        on_stack(200, "app", &["main", "parse"], 500_000_000, 5),
        stack(Kind::Off, Some(State::R), 200, "app", &["main", "compute"], 100_000_000),
        stack(Kind::Off, Some(State::S), 200, "app", &["main", "nanosleep"], 150_000_000),
        stack(Kind::Off, Some(State::D), 200, "app", &["main", "fsync"], 50_000_000),
        Record::Stack(gpu),
        stack(Kind::On, None, 201, "worker-1", &["start", "worker", "hash"], 100_000_000),
        stack(
            Kind::Off,
            Some(State::S),
            201,
            "worker-1",
            &["start", "worker", "pthread_mutex_lock", "__lll_lock_wait", "futex_wait"],
            1_500_000_000,
        ),
        stack(Kind::Off, Some(State::S), 201, "worker-1", &["start", "worker", "nanosleep"], 300_000_000),
        stack(Kind::Off, Some(State::D), 201, "worker-1", &["start", "worker", "fsync"], 100_000_000),
        stack(Kind::On, None, 202, "io-3", &["io_main", "checksum"], 200_000_000),
        stack(Kind::Off, Some(State::D), 202, "io-3", &["io_main", "pwrite64", "ext4_file_write_iter"], 498_000_000),
        stack(Kind::Off, Some(State::S), 202, "io-3", &["[short blocks]"], 100_000_000),
        stack(Kind::Off, Some(State::D), 202, "io-3", &["[lost stack]"], 2_000_000),
        Record::Stats(Stats {
            end_ns: Some(END),
            counts: [("short_blocks".to_string(), 7), ("lost_stacks".to_string(), 1)].into(),
        }),
    ]);
    if let Some(t) = only_tid {
        recs.retain(|r| match r {
            Record::Thread(x) => x.tid == t,
            Record::Stack(x) => x.tid == t,
            _ => true,
        });
    }
    jsonl(&recs)
}

fn alive(t: &Thread) -> u64 {
    t.end_ns.unwrap_or(END) - t.start_ns.unwrap_or(START)
}

fn json_thread(v: &Value, tid: u32) -> &Value {
    v["threads"].as_array().unwrap().iter().find(|t| t["tid"] == tid).unwrap_or_else(|| panic!("no thread {tid}"))
}

#[test]
fn json_figures_match_the_input() {
    let v: Value = serde_json::from_str(&ok(TOOL, &["--json"], input(None).as_bytes())).unwrap();
    let mut thread_ns = 0;
    let mut on_sum = 0;
    for t in threads() {
        let j = json_thread(&v, t.tid);
        let off = t.off_ns.unwrap();
        assert_eq!(j["alive_ns"], alive(&t), "tid {}", t.tid);
        assert_eq!(j["on_ns"], t.on_ns.unwrap());
        assert_eq!(
            (j["off_ns"]["R"].as_u64(), j["off_ns"]["S"].as_u64(), j["off_ns"]["D"].as_u64()),
            (Some(off.r), Some(off.s), Some(off.d))
        );
        assert_eq!(j["off_total_ns"], off.total());
        let cov = (t.on_ns.unwrap() + off.total()) as f64 * 100.0 / alive(&t) as f64;
        assert!(
            (j["coverage_pct"].as_f64().unwrap() - cov).abs() < 1e-9,
            "tid {} {} vs {cov}",
            t.tid,
            j["coverage_pct"]
        );
        thread_ns += alive(&t);
        on_sum += t.on_ns.unwrap();
    }
    // Accounting that covers the life shows 100%; one that does not shows less.
    assert_eq!(json_thread(&v, 200)["coverage_pct"], 100.0);
    assert_eq!(json_thread(&v, 202)["coverage_pct"], 80.0);
    // GPU time is reported beside, never inside, the thread's wall clock.
    assert_eq!(json_thread(&v, 200)["gpu_ns"], 400_000_000);
    let p = &v["processes"][0];
    assert_eq!((p["pid"].as_u64(), p["comm"].as_str(), p["threads"].as_u64()), (Some(200), Some("app"), Some(3)));
    assert_eq!(p["wall_ns"], END - START);
    assert_eq!(p["thread_ns"], thread_ns);
    assert_eq!(p["on_ns"], on_sum);
    assert_eq!(p["gpu_ns"], 400_000_000);
    // Shown, not hidden: what the header and trailer say was lost, and the synthetic stacks.
    assert_eq!(v["lost"]["ringbuf_drops"], 2);
    assert_eq!(v["stats"]["short_blocks"], 7);
    assert_eq!(v["short_blocks_ns"], 100_000_000);
    assert_eq!(v["lost_stack_ns"], 2_000_000);
    assert_eq!(json_thread(&v, 202)["short_blocks_ns"], 100_000_000);
    // Top stacks: heaviest first, percent of the thread's alive time.
    let top = &json_thread(&v, 200)["top"]["on"];
    assert_eq!(top[0]["stack"], "main;compute");
    assert_eq!(top[0]["ns"], 1_200_000_000);
    assert_eq!(top[0]["pct"], 1_200_000_000f64 * 100.0 / (END - START) as f64);
    let off_top = &json_thread(&v, 201)["top"]["off"];
    assert_eq!(off_top[0]["stack"], "start;worker;pthread_mutex_lock;__lll_lock_wait;futex_wait;[sleep]");
    assert_eq!(off_top[0]["state"], "S");
    assert_eq!(json_thread(&v, 200)["top"]["gpu"][0]["stack"], "main;launch;gemm");
    // --top limits the list.
    let v1: Value = serde_json::from_str(&ok(TOOL, &["--json", "--top", "1"], input(None).as_bytes())).unwrap();
    assert_eq!(json_thread(&v1, 201)["top"]["off"].as_array().unwrap().len(), 1);
}

#[test]
fn roles_and_behaviour_classes() {
    let v: Value = serde_json::from_str(&ok(TOOL, &["--json"], input(None).as_bytes())).unwrap();
    let rc = |tid: u32| {
        (
            json_thread(&v, tid)["role"].as_str().unwrap().to_string(),
            json_thread(&v, tid)["class"].as_str().unwrap().to_string(),
        )
    };
    assert_eq!(rc(200), ("main".into(), "cpu-bound".into()));
    assert_eq!(rc(201), ("worker".into(), "lock-waiting".into()));
    assert_eq!(rc(202), ("io".into(), "io-bound".into()));
}

#[test]
fn text_report_is_aligned_and_honest() {
    let txt = ok(TOOL, &[], input(None).as_bytes());
    // The thread table: right-aligned last column, so every row ends at the same width.
    let table: Vec<&str> = txt.lines().skip_while(|l| !l.trim_start().starts_with("TID")).take(4).collect();
    assert_eq!(table.len(), 4, "{txt}");
    let w = table[0].chars().count();
    assert!(table.iter().all(|l| l.chars().count() == w), "{table:#?}");
    let col = table[0].find("COVERAGE").unwrap();
    assert!(table[1..].iter().all(|l| l[col..].trim().ends_with('%')));
    assert!(table[3].contains("io-3") && table[3].ends_with("80.0%"), "{}", table[3]);
    // Human units of the input's figures, and the lost counts shown.
    for t in threads() {
        assert!(txt.contains(&format!("on-CPU {}", human_ns(t.on_ns.unwrap()))), "{}", t.tid);
    }
    assert!(txt.contains("ringbuf_drops=2") && txt.contains("short_blocks=7"), "{txt}");
    assert!(txt.contains(&format!("[short blocks] {}", human_ns(100_000_000))));
    assert!(txt.contains(&format!("thread-time; on-CPU {}", human_ns(2_000_000_000))));
    // stdin and a file argument give the same report.
    let dir = scratch("wcreport-text");
    let p = dir.join("in.json");
    std::fs::write(&p, input(None)).unwrap();
    assert_eq!(ok(TOOL, &[p.to_str().unwrap()], b""), txt);
    util::golden("wcreport/three-threads.txt", &txt);
    // JSON comes out on one line (for grep and jq); the golden is pretty for review.
    let json = ok(TOOL, &["--json", p.to_str().unwrap()], b"");
    assert_eq!(json.lines().count(), 1);
    assert!(json.contains("\"tid\":202"));
    let v: Value = serde_json::from_str(&json).unwrap();
    util::golden("wcreport/three-threads.json", &(serde_json::to_string_pretty(&v).unwrap() + "\n"));
}

#[test]
fn split_files_hold_each_threads_numbers() {
    let dir = scratch("wcreport-split");
    let tdir = dir.join("threads");
    let prefix = dir.join("run");
    let quiet = ok(
        TOOL,
        &["--split-dir", tdir.to_str().unwrap(), "--prefix", prefix.to_str().unwrap()],
        input(None).as_bytes(),
    );
    let overview = dir.join("run_thread_analysis.txt");
    assert_eq!(quiet, "", "split mode writes files, nothing on stdout");
    let ov = std::fs::read_to_string(&overview).unwrap();
    assert!(!dir.join("run_single_thread_analysis.txt").exists(), "three threads: no single-thread file");
    for t in threads() {
        assert!(ov.contains(&t.comm));
        let role = if t.tid == 200 {
            "main"
        } else if t.tid == 201 {
            "worker"
        } else {
            "io"
        };
        let f = tdir.join(format!("thread_{}_{role}_analysis.txt", t.tid));
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let off = t.off_ns.unwrap();
        let cov = (t.on_ns.unwrap() + off.total()) as f64 * 100.0 / alive(&t) as f64;
        assert!(text.contains(&format!("THREAD {} {}", t.tid, t.comm)), "{text}");
        assert!(text.contains(&format!("alive {}", human_ns(alive(&t)))), "{text}");
        assert!(text.contains(&format!("on-CPU {}", human_ns(t.on_ns.unwrap()))), "{text}");
        assert!(text.contains(&format!("sleeping {}", human_ns(off.s))), "{text}");
        assert!(text.contains(&format!("uninterruptible {}", human_ns(off.d))), "{text}");
        assert!(text.contains(&format!("coverage {cov:.1}%")), "{text}");
        // Only its own row.
        for other in threads().iter().filter(|o| o.tid != t.tid) {
            assert!(!text.contains(&format!("THREAD {}", other.tid)), "{text}");
        }
    }
    // A one-thread target also gets the single-thread file, with its numbers.
    let dir1 = scratch("wcreport-split1");
    let prefix1 = dir1.join("one");
    ok(
        TOOL,
        &["--split-dir", dir1.to_str().unwrap(), "--prefix", prefix1.to_str().unwrap()],
        input(Some(201)).as_bytes(),
    );
    let single = std::fs::read_to_string(dir1.join("one_single_thread_analysis.txt")).unwrap();
    assert!(single.contains("THREAD 201 worker-1") && single.contains("lock-waiting"), "{single}");
    assert!(single.contains(&format!("on-CPU {}", human_ns(100_000_000))));
    assert!(dir1.join("thread_201_worker_analysis.txt").exists());
    assert!(dir1.join("one_thread_analysis.txt").exists());
}

#[test]
fn bcc_inputs_through_stackmerge() {
    let (Some(offp), Some(onp)) = (testdata("bcc/offcputime-f-mixed.folded"), testdata("bcc/profile-f-mixed.folded"))
    else {
        return;
    };
    // Values summed per distinct stack (a stack's samples scale once).
    let vals = |p: &std::path::Path| -> Vec<u64> {
        let mut per: std::collections::BTreeMap<String, u64> = Default::default();
        for l in std::fs::read_to_string(p).unwrap().lines().filter(|l| !l.trim().is_empty()) {
            let (stack, v) = l.rsplit_once(' ').unwrap();
            *per.entry(stack.to_string()).or_insert(0) += v.trim().parse::<u64>().unwrap();
        }
        per.into_values().collect()
    };
    let want_off: u64 = vals(&offp).iter().map(|v| v * 1_000).sum();
    let want_on: u64 = vals(&onp).iter().map(|n| ((*n as u128 * 1_000_000_000 + 24) / 49) as u64).sum();
    let merged = ok("stackmerge", &[offp.to_str().unwrap(), "--on", onp.to_str().unwrap()], b"");
    let v: Value = serde_json::from_str(&ok(TOOL, &["--json"], merged.as_bytes())).unwrap();
    let p = &v["processes"][0];
    assert_eq!(p["on_ns"], want_on);
    assert_eq!(p["off_total_ns"], want_off);
    // No state in bcc's output: the time is shown as "other", not guessed.
    assert_eq!(p["off_ns"]["other"], want_off);
    // No window and no thread lives in folded input: coverage unknown, not invented.
    assert!(json_thread(&v, 0)["coverage_pct"].is_null());
    // And plain folded lines are read directly too.
    let direct: Value = serde_json::from_str(&ok(TOOL, &["--json", offp.to_str().unwrap()], b"")).unwrap();
    assert_eq!(direct["threads"][0]["other_ns"], want_off);
}

#[test]
fn bad_line_named_report_of_what_came_before() {
    let text = format!("{}{{\"type\":\"stack\",\"kind\":\"sideways\"}}\n", input(Some(201)));
    let bad_line = text.lines().count();
    let out = run(TOOL, &["--json"], text.as_bytes());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("wcreport: error:") && err.contains(&format!("line {bad_line}")), "{err}");
    assert_eq!(err.lines().count(), 1);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json_thread(&v, 201)["on_ns"], 100_000_000);
    // Empty input: a report of nothing, exit 0.
    let empty = ok(TOOL, &[], b"");
    assert!(empty.contains("0 thread(s)"), "{empty}");
    let help = ok(TOOL, &["--help"], b"");
    assert!(help.contains("EXAMPLES:") && help.contains("--split-dir"));
}

#[test]
fn head_closes_the_pipe_quietly() {
    let mut recs = Vec::new();
    for tid in 1..4000u32 {
        recs.push(stack(Kind::Off, Some(State::S), tid, "w", &["main", "poll"], tid as u64 * 1000));
    }
    let input = jsonl(&recs);
    let (first, status, err) = util::first_line_then_close(TOOL, &[], input.into_bytes());
    assert!(first.starts_with("wall-clock report"), "{first}");
    assert!(status.success() && err.is_empty(), "{status}: {err}");
}

/// A capture stream read directly: sampled stacks carry a sampler's
/// estimate; the report divides the thread's exact on-CPU time by samples.
#[test]
fn raw_samples_divide_exact_on_cpu_time() {
    let mut h = Header::new("oncputime", "test");
    h.start_ns = Some(START);
    h.end_ns = Some(END);
    let mut t = Thread::new(300, 300, "calc");
    t.on_ns = Some(1_000_000_007);
    let recs = jsonl(&[
        Record::Header(h),
        Record::Thread(t),
        on_stack_of(300, &["main", "a"], 3),
        on_stack_of(300, &["main", "b"], 4),
    ]);
    let v: Value = serde_json::from_str(&ok(TOOL, &["--json"], recs.as_bytes())).unwrap();
    let th = &v["threads"][0];
    let top = th["top"]["on"].as_array().unwrap();
    let want = |n: u128| ((1_000_000_007u128 * n + 3) / 7) as u64;
    assert_eq!((top[0]["stack"].as_str(), top[0]["ns"].as_u64()), (Some("main;b"), Some(want(4))));
    assert_eq!((top[1]["stack"].as_str(), top[1]["ns"].as_u64()), (Some("main;a"), Some(want(3))));
    assert_eq!(th["on_ns"], 1_000_000_007);
}

fn on_stack_of(pid: u32, frames: &[&str], samples: u64) -> Record {
    let mut s = Stack::new(Kind::On, pid, pid, "calc");
    s.frames = frames.iter().map(|f| Frame::named(*f)).collect();
    s.count = samples;
    s.ns = samples * 20_408_163; // what a 49 Hz sampler would estimate
    Record::Stack(s)
}

// ---------------------------------------------------------------------
// The GPU section.

/// One GPU record of the hand-written stream.
struct G {
    tid: u32,
    device: Option<u32>,
    activity: &'static str,
    name: &'static str,
    ns: u64,
    count: u64,
    delay: Option<u64>,
}

/// Two devices, one kernel launched from two threads, a kernel whose
/// launches only partly carry a delay, copies, a memset, and both
/// threads waiting in synchronizations.
fn gpu_recs() -> Vec<G> {
    let g = |tid, device, activity, name, ns, count, delay| G { tid, device, activity, name, ns, count, delay };
    vec![
        g(200, Some(0), "kernel", "gemm(float*, int)", 300_000, 3, Some(30_000)),
        g(201, Some(0), "kernel", "gemm(float*, int)", 100_000, 1, Some(50_000)),
        g(200, Some(1), "kernel", "relu", 50_000, 10, Some(1_000_000)),
        g(201, Some(1), "kernel", "softmax", 200_000, 2, None),
        g(200, Some(1), "kernel", "softmax", 100_000, 1, Some(9_000)),
        g(200, Some(0), "memcpy", "[memcpy HtoD]", 70_000, 2, Some(4_000)),
        g(201, Some(1), "memcpy", "[memcpy DtoH]", 40_000, 1, Some(2_000)),
        g(201, Some(1), "memset", "[memset]", 11_000, 1, Some(1_000)),
        g(200, None, "sync", "[sync device]", 500_000, 2, None),
        g(201, None, "sync", "[sync stream]", 300_000, 1, None),
    ]
}

const GPU_DROPPED: u64 = 3;
const GPU_UNMATCHED: u64 = 1;

/// The three-thread process (exact accounting) with, optionally, the GPU records.
fn gpu_input(with_gpu: bool) -> String {
    let mut h = Header::new("stackmerge", "test");
    h.pids = vec![200];
    h.start_ns = Some(START);
    h.end_ns = Some(END);
    let mut recs = vec![Record::Header(h)];
    recs.extend(threads().into_iter().map(Record::Thread));
    recs.push(stack(Kind::On, None, 200, "app", &["main", "compute"], 1_700_000_000));
    recs.push(stack(Kind::Off, Some(State::S), 201, "worker-1", &["start", "worker", "futex_wait"], 1_800_000_000));
    let mut counts = std::collections::BTreeMap::new();
    if with_gpu {
        for (i, g) in gpu_recs().iter().enumerate() {
            let comm = if g.tid == 200 { "app" } else { "worker-1" };
            let mut s = Stack::new(Kind::Gpu, 200, g.tid, comm);
            let launcher = format!("launch_{i}");
            s.frames = vec![Frame::named("main"), Frame::named(launcher.as_str()), Frame::named(g.name)];
            s.ns = g.ns;
            s.count = g.count;
            s.gpu = Some(GpuInfo {
                activity: g.activity.into(),
                device: g.device,
                stream: Some(7),
                launch_delay_ns: g.delay,
                name: Some(g.name.into()),
            });
            recs.push(Record::Stack(s));
        }
        counts.insert("gpu_records_dropped".to_string(), GPU_DROPPED);
        counts.insert("gpu_unmatched".to_string(), GPU_UNMATCHED);
    }
    recs.push(Record::Stats(Stats { end_ns: Some(END), counts }));
    jsonl(&recs)
}

fn mean(sum: u64, n: u64) -> u64 {
    (sum + n / 2) / n
}

#[test]
fn gpu_section_adds_up() {
    let v: Value = serde_json::from_str(&ok(TOOL, &["--json", "--top", "10"], gpu_input(true).as_bytes())).unwrap();
    let g = &v["gpu"];
    let recs = gpu_recs();
    // Busy time per device: kernels + copies + memsets, never the CPU's sync wait.
    for dev in [0u32, 1] {
        let want: u64 = recs.iter().filter(|r| r.device == Some(dev) && r.activity != "sync").map(|r| r.ns).sum();
        let d = g["devices"].as_array().unwrap().iter().find(|d| d["device"] == dev).unwrap();
        assert_eq!(d["busy_ns"], want, "device {dev}");
        let kern: u64 = recs.iter().filter(|r| r.device == Some(dev) && r.activity == "kernel").map(|r| r.ns).sum();
        assert_eq!(d["kernel_ns"], kern, "device {dev}");
    }
    assert_eq!(g["devices"].as_array().unwrap().len(), 2, "sync names no device and makes none");
    let busy: u64 = recs.iter().filter(|r| r.activity != "sync").map(|r| r.ns).sum();
    assert_eq!(g["busy_ns"], busy);
    // Kernels summed by name over threads, stacks and devices.
    let mut by: std::collections::BTreeMap<&str, (u64, u64, u64, u64)> = Default::default();
    for r in recs.iter().filter(|r| r.activity == "kernel") {
        let e = by.entry(r.name).or_default();
        e.0 += r.ns;
        e.1 += r.count;
        if let Some(d) = r.delay {
            e.2 += d;
            e.3 += r.count;
        }
    }
    let mut want: Vec<_> = by.into_iter().collect();
    want.sort_by_key(|w| std::cmp::Reverse(w.1 .0));
    let names = |key: &str| -> Vec<String> {
        g[key].as_array().unwrap().iter().map(|k| k["name"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(names("top_kernels_by_ns"), want.iter().map(|w| w.0.to_string()).collect::<Vec<_>>());
    let mut by_count = want.clone();
    by_count.sort_by_key(|w| std::cmp::Reverse(w.1 .1));
    assert_eq!(names("top_kernels_by_count"), by_count.iter().map(|w| w.0.to_string()).collect::<Vec<_>>());
    assert_ne!(names("top_kernels_by_ns"), names("top_kernels_by_count"), "the input makes the orders differ");
    for (i, (name, (ns, count, delay, delayed))) in want.iter().enumerate() {
        let k = &g["top_kernels_by_ns"][i];
        assert_eq!(k["name"], *name);
        assert_eq!((k["ns"].as_u64(), k["count"].as_u64()), (Some(*ns), Some(*count)), "{name}");
        assert_eq!(k["mean_ns"], mean(*ns, *count), "{name}");
        assert_eq!(k["launch_delay_ns"], *delay, "{name}");
        // The mean is over the launches whose delay is known (softmax: 1 of 3).
        assert_eq!(k["mean_launch_delay_ns"], mean(*delay, *delayed), "{name}");
    }
    assert_eq!(g["kernel_count"], recs.iter().filter(|r| r.activity == "kernel").map(|r| r.count).sum::<u64>());
    assert_eq!(g["kernels"], want.len());
    // --top limits both lists.
    let v1: Value = serde_json::from_str(&ok(TOOL, &["--json", "--top", "1"], gpu_input(true).as_bytes())).unwrap();
    assert_eq!(v1["gpu"]["top_kernels_by_ns"][0]["name"], want[0].0);
    assert_eq!(v1["gpu"]["top_kernels_by_count"].as_array().unwrap().len(), 1);
    // Copies and memsets.
    let sum = |act: &str| -> (u64, u64) {
        recs.iter().filter(|r| r.activity == act).fold((0, 0), |a, r| (a.0 + r.ns, a.1 + r.count))
    };
    assert_eq!(
        (g["memcpy"]["ns"].as_u64(), g["memcpy"]["count"].as_u64()),
        (Some(sum("memcpy").0), Some(sum("memcpy").1))
    );
    assert_eq!(g["memcpy"]["by_kind"][0]["name"], "[memcpy HtoD]");
    assert_eq!(
        (g["memset"]["ns"].as_u64(), g["memset"]["count"].as_u64()),
        (Some(sum("memset").0), Some(sum("memset").1))
    );
    // The CPU's waits, per thread and total.
    assert_eq!((g["sync"]["ns"].as_u64(), g["sync"]["count"].as_u64()), (Some(sum("sync").0), Some(sum("sync").1)));
    for tid in [200u32, 201] {
        let want: u64 = recs.iter().filter(|r| r.activity == "sync" && r.tid == tid).map(|r| r.ns).sum();
        let t = g["sync"]["threads"].as_array().unwrap().iter().find(|t| t["tid"] == tid).unwrap();
        assert_eq!(t["ns"], want, "tid {tid}");
        assert_eq!(json_thread(&v, tid)["gpu_sync_ns"], want, "tid {tid}");
        let work: u64 = recs.iter().filter(|r| r.activity != "sync" && r.tid == tid).map(|r| r.ns).sum();
        assert_eq!(json_thread(&v, tid)["gpu_ns"], work, "tid {tid}: GPU work, the sync wait apart");
    }
    assert_eq!(g["sync"]["threads"][0]["comm"], "app");
    // Losses shown, not hidden.
    assert_eq!(g["records_dropped"], GPU_DROPPED);
    assert_eq!(g["unmatched"], GPU_UNMATCHED);
}

#[test]
fn gpu_time_never_changes_coverage() {
    let with: Value = serde_json::from_str(&ok(TOOL, &["--json"], gpu_input(true).as_bytes())).unwrap();
    let without: Value = serde_json::from_str(&ok(TOOL, &["--json"], gpu_input(false).as_bytes())).unwrap();
    assert!(without.get("gpu").is_none(), "no GPU records, no GPU section");
    for t in threads() {
        let (a, b) = (json_thread(&with, t.tid), json_thread(&without, t.tid));
        let cov = (t.on_ns.unwrap() + t.off_ns.unwrap().total()) as f64 * 100.0 / alive(&t) as f64;
        assert_eq!(a["coverage_pct"].as_f64(), Some(cov), "tid {}", t.tid);
        for k in ["coverage_pct", "alive_ns", "on_ns", "off_total_ns", "class"] {
            assert_eq!(a[k], b[k], "tid {} {k}", t.tid);
        }
    }
    assert!(with["threads"].as_array().unwrap().iter().any(|t| t["gpu_ns"].as_u64() > Some(0)));
    let (p, q) = (&with["processes"][0], &without["processes"][0]);
    for k in ["coverage_pct", "thread_ns", "on_ns", "off_total_ns"] {
        assert_eq!(p[k], q[k], "process {k}");
    }
}

#[test]
fn gpu_section_in_text_and_split_overview() {
    let txt = ok(TOOL, &[], gpu_input(true).as_bytes());
    let recs = gpu_recs();
    let busy: u64 = recs.iter().filter(|r| r.activity != "sync").map(|r| r.ns).sum();
    assert!(txt.contains(&format!("GPU: busy {} (summed activity time", human_ns(busy))), "{txt}");
    let dev1: u64 = recs.iter().filter(|r| r.device == Some(1) && r.activity != "sync").map(|r| r.ns).sum();
    assert!(txt.lines().any(|l| l.trim_start().starts_with('1') && l.contains(&human_ns(dev1))), "{txt}");
    let sync: u64 = recs.iter().filter(|r| r.activity == "sync").map(|r| r.ns).sum();
    assert!(txt.contains(&format!("CPU waiting in GPU synchronization: {} in 3 call(s)", human_ns(sync))), "{txt}");
    assert!(
        txt.contains(&format!("records dropped {GPU_DROPPED}, unmatched (no launch stack) {GPU_UNMATCHED}")),
        "{txt}"
    );
    assert!(txt.contains("top kernels by time:") && txt.contains("top kernels by count:"), "{txt}");
    assert!(!ok(TOOL, &[], gpu_input(false).as_bytes()).contains("GPU:"), "no GPU records, no GPU section");
    let dir = scratch("wcreport-gpu-split");
    let prefix = dir.join("run");
    ok(TOOL, &["--split-dir", dir.to_str().unwrap(), "--prefix", prefix.to_str().unwrap()], gpu_input(true).as_bytes());
    let ov = std::fs::read_to_string(dir.join("run_thread_analysis.txt")).unwrap();
    assert!(ov.contains(&format!("GPU: busy {}", human_ns(busy))), "{ov}");
    let t201 = std::fs::read_to_string(dir.join("thread_201_worker_analysis.txt")).unwrap();
    let w201: u64 = recs.iter().filter(|r| r.activity == "sync" && r.tid == 201).map(|r| r.ns).sum();
    assert!(t201.contains(&format!("waiting in GPU synchronization {}", human_ns(w201))), "{t201}");
}

// ---------------------------------------------------------------------
// End to end: gputrace on the fake CUDA program (tests/programs/gpu),
// stacksym, stackmerge --gpu, wcreport --json, against the fake's truth.

/// Builds the fakes and the program once, as tests/gpu.rs does: the dir.
fn gpu_fakes() -> &'static std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let src = util::root().join("tests/programs/gpu");
        let dir = scratch("wcreport-gpu-fakes");
        let gcc = |args: &[&str]| {
            let out =
                Command::new("gcc").args(args).current_dir(&src).output().expect("gcc is needed for the GPU tests");
            assert!(out.status.success(), "gcc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        let d = dir.to_str().unwrap();
        let lib = |name: &str| format!("{d}/{name}");
        gcc(&[
            "-shared",
            "-fPIC",
            "-O2",
            "-g",
            "-Wall",
            "-o",
            &lib("libcuda.so.1"),
            "-Wl,-soname,libcuda.so.1",
            "fake_cuda.c",
            "-ldl",
            "-lpthread",
        ]);
        std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).unwrap();
        gcc(&[
            "-shared",
            "-fPIC",
            "-O2",
            "-g",
            "-Wall",
            "-o",
            &lib("libcudart.so"),
            "fake_cudart.c",
            "-L",
            d,
            "-lcuda",
        ]);
        gcc(&[
            "-shared",
            "-fPIC",
            "-O2",
            "-g",
            "-Wall",
            "-o",
            &lib("libcupti.so.12"),
            "fake_cupti.c",
            "-ldl",
            "-lpthread",
        ]);
        let rpath = format!("-Wl,-rpath,{d}");
        gcc(&[
            "-O2",
            "-g",
            "-fomit-frame-pointer",
            "-fno-optimize-sibling-calls",
            "-Wall",
            "-o",
            &lib("gpu_app"),
            "gpu_app.c",
            "-L",
            d,
            "-lcudart",
            "-lcuda",
            &rpath,
        ]);
        dir
    })
}

/// The fake's kernels: name in its truth file, demangled name in the stream.
const FAKE_KERNELS: &[(&str, &str)] = &[
    ("_Z4gemmPKfS0_Pfi", "gemm(float const*, float const*, float*, int)"),
    ("_Z4reluPfi", "relu(float*, int)"),
    ("scale_kernel", "scale_kernel"),
    ("_Z8add_biasPfPKfi", "add_bias(float*, float const*, int)"),
    ("_Z7softmaxPfi", "softmax(float*, int)"),
];

/// Runs the pipeline: (gputrace's own stream, wcreport's JSON, the truth lines).
fn gpu_pipeline(name: &str, iters: &str, env: &[(&str, &str)]) -> (Vec<Record>, Value, Vec<Vec<String>>) {
    let dir = gpu_fakes();
    let work = scratch(name);
    let (raw, sym, merged, truth) =
        (work.join("raw.jsonl"), work.join("sym.jsonl"), work.join("merged.jsonl"), work.join("truth.txt"));
    let mut cmd = Command::new(util::bin("gputrace"));
    for v in ["LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "PYTHONPATH", "CUDA_INJECTION64_PATH"] {
        cmd.env_remove(v);
    }
    cmd.arg("--gpu-only").arg("-o").arg(&raw).arg("--").arg(dir.join("gpu_app")).arg(iters);
    cmd.env("WALLCLOCK_CUPTI_PATH", dir.join("libcupti.so.12")).env("FAKECUDA_TRUTH", &truth);
    cmd.envs(env.iter().copied());
    let out = cmd.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "gputrace passes the program's exit code: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p = |x: &std::path::Path| x.to_str().unwrap().to_string();
    std::fs::write(&sym, ok("stacksym", &[&p(&raw)], b"")).unwrap();
    std::fs::write(&merged, ok("stackmerge", &["--gpu", &p(&sym)], b"")).unwrap();
    let v: Value = serde_json::from_str(&ok(TOOL, &["--json", "--top", "100", &p(&merged)], b"")).unwrap();
    let text = std::fs::read_to_string(&raw).unwrap();
    let recs = wallclock_stream::Reader::new(text.as_bytes(), "raw", Default::default())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let truth = std::fs::read_to_string(&truth).unwrap();
    let lines = truth.lines().map(|l| l.split_whitespace().map(String::from).collect()).collect();
    (recs, v, lines)
}

/// Truth lines are `KIND CORR NAME NS` (kernel, memcpy, memset, sync).
fn truth_of(lines: &[Vec<String>], kind: &str, name: Option<&str>) -> (u64, u64) {
    lines
        .iter()
        .filter(|f| f[0] == kind && (name.is_none() || name == Some(f[2].as_str())))
        .fold((0, 0), |a, f| (a.0 + f[3].parse::<u64>().unwrap(), a.1 + 1))
}

#[test]
fn gpu_section_of_the_fake_cuda_program_matches_its_truth() {
    let (raw, v, truth) = gpu_pipeline("wcreport-gpu-e2e", "7", &[]);
    let g = &v["gpu"];
    // What the virtual GPU ran: kernels, copies and memsets, on its one device.
    let kern = truth_of(&truth, "kernel", None);
    let copy = truth_of(&truth, "memcpy", None);
    let set = truth_of(&truth, "memset", None);
    let sync = truth_of(&truth, "sync", None);
    assert!(kern.1 > 0 && copy.1 > 0 && set.1 > 0 && sync.1 > 0, "the fake ran every kind of work: {truth:?}");
    assert_eq!(g["devices"].as_array().unwrap().len(), 1);
    let d = &g["devices"][0];
    assert_eq!(d["device"], 0);
    assert_eq!(d["busy_ns"], kern.0 + copy.0 + set.0);
    assert_eq!(g["busy_ns"], kern.0 + copy.0 + set.0);
    assert_eq!((g["kernel_ns"].as_u64(), g["kernel_count"].as_u64()), (Some(kern.0), Some(kern.1)));
    assert_eq!((g["memcpy"]["ns"].as_u64(), g["memcpy"]["count"].as_u64()), (Some(copy.0), Some(copy.1)));
    // The fake's copy takes one ns per byte.
    assert_eq!(g["memcpy"]["bytes"], copy.0);
    for dir in ["HtoD", "DtoH"] {
        let t = truth_of(&truth, "memcpy", Some(dir));
        let k =
            g["memcpy"]["by_kind"].as_array().unwrap().iter().find(|k| k["name"] == format!("[memcpy {dir}]")).unwrap();
        assert_eq!((k["ns"].as_u64(), k["count"].as_u64()), (Some(t.0), Some(t.1)), "{dir}");
    }
    assert_eq!((g["memset"]["ns"].as_u64(), g["memset"]["count"].as_u64()), (Some(set.0), Some(set.1)));
    // Every kernel by name, with its exact time and count; both orders.
    let mut want: Vec<(&str, (u64, u64))> =
        FAKE_KERNELS.iter().map(|(m, n)| (*n, truth_of(&truth, "kernel", Some(m)))).collect();
    assert_eq!(g["kernels"], want.len());
    want.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(b.1 .1.cmp(&a.1 .1)).then(a.0.cmp(b.0)));
    let by_ns = g["top_kernels_by_ns"].as_array().unwrap();
    assert_eq!(by_ns.len(), want.len());
    for (k, (name, (ns, count))) in by_ns.iter().zip(&want) {
        assert_eq!((k["name"].as_str(), k["ns"].as_u64(), k["count"].as_u64()), (Some(*name), Some(*ns), Some(*count)));
        assert_eq!(k["mean_ns"], (ns + count / 2) / count, "{name}");
        // Launch-to-start delays: the sum gputrace measured, carried through
        // stacksym and stackmerge; every launch has one.
        let (delay, n) = raw
            .iter()
            .filter_map(|r| if let Record::Stack(s) = r { s.gpu.as_ref().map(|g| (g, s.count)) } else { None })
            .filter(|(g, _)| g.name.as_deref() == Some(*name))
            .fold((0, 0), |a, (g, c)| (a.0 + g.launch_delay_ns.expect("a launch delay"), a.1 + c));
        assert_eq!(n, *count, "{name}");
        assert_eq!(k["launch_delay_ns"], delay, "{name}");
        assert_eq!(k["mean_launch_delay_ns"], (delay + n / 2) / n, "{name}");
        assert!(delay > 0, "{name}: the fake starts work 1.5 us after the call at the earliest");
    }
    want.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then(b.1 .0.cmp(&a.1 .0)).then(a.0.cmp(b.0)));
    let by_count: Vec<&str> =
        g["top_kernels_by_count"].as_array().unwrap().iter().map(|k| k["name"].as_str().unwrap()).collect();
    assert_eq!(by_count, want.iter().map(|w| w.0).collect::<Vec<_>>());
    // The CPU waited in cudaDeviceSynchronize for exactly the fake's wait,
    // on the program's one thread.
    let pid = v["processes"][0]["pid"].as_u64().unwrap();
    assert_eq!((g["sync"]["ns"].as_u64(), g["sync"]["count"].as_u64()), (Some(sync.0), Some(sync.1)));
    let t = &g["sync"]["threads"][0];
    assert_eq!((t["tid"].as_u64(), t["ns"].as_u64(), t["comm"].as_str()), (Some(pid), Some(sync.0), Some("gpu_app")));
    assert_eq!(json_thread(&v, pid as u32)["gpu_sync_ns"], sync.0);
    assert_eq!(json_thread(&v, pid as u32)["gpu_ns"], kern.0 + copy.0 + set.0);
    // Nothing lost, and that is said.
    assert_eq!((g["records_dropped"].as_u64(), g["unmatched"].as_u64()), (Some(0), Some(0)));
    assert_eq!(g["cupti_unavailable"], 0);
    assert!(g["cupti_overhead_ns"].as_u64() > Some(0));
}

#[test]
fn gpu_records_cupti_dropped_are_shown() {
    let (_, v, truth) = gpu_pipeline("wcreport-gpu-dropped", "5", &[("FAKE_CUPTI_DROP", "2")]);
    let g = &v["gpu"];
    assert_eq!(g["records_dropped"], 2);
    // The two dropped kernels are missing from the counts, not invented.
    assert_eq!(g["kernel_count"], truth_of(&truth, "kernel", None).1 - 2);
}

/// Plain folded `_[g]` lines (flame's or stackmerge --folded's): the value
/// is time in µs, not a number of launches; the activity comes from the leaf.
#[test]
fn gpu_section_of_plain_folded_lines() {
    let lines = [("main;launch;gemm", 5u64), ("main;copy;[memcpy HtoD]", 3), ("main;wait;[sync device]", 7)];
    let text: String = lines.iter().map(|(s, v)| format!("{s}_[g] {v}\n")).collect();
    let v: Value = serde_json::from_str(&ok(TOOL, &["--json"], text.as_bytes())).unwrap();
    let g = &v["gpu"];
    assert_eq!(g["busy_ns"], (lines[0].1 + lines[1].1) * 1000, "the sync wait is no device time");
    assert_eq!(g["memcpy"]["ns"], lines[1].1 * 1000);
    assert_eq!(g["sync"]["ns"], lines[2].1 * 1000);
    let k = &g["top_kernels_by_ns"][0];
    assert_eq!((k["name"].as_str(), k["ns"].as_u64()), (Some("gemm"), Some(lines[0].1 * 1000)));
    assert!(k["mean_ns"].is_null() && g["kernel_count"] == 0, "no count in folded input, none invented: {k}");
}
