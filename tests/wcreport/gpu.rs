//! The GPU section, from hand-written GPU records and from plain folded
//! lines: what it adds up, and that it never changes a thread's coverage.

use serde_json::Value;
use wallclock_stream::units::human_ns;
use wallclock_stream::{Frame, GpuInfo, Header, Kind, Record, Stack, State, Stats};

use super::helpers::{alive, json_thread, jsonl, stack, threads, END, START, TOOL};
use super::util::{ok, scratch};

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
