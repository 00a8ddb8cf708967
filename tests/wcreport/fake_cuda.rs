//! End to end: gputrace on the fake CUDA program (tests/programs/gpu),
//! stacksym, stackmerge --gpu, wcreport --json, against the fake's truth.

use std::process::Command;

use serde_json::Value;
use wallclock_stream::Record;

use super::helpers::{json_thread, TOOL};
use super::util::{self, ok, scratch};

/// Builds the fakes and the program once, as tests/gpu.rs does: the dir.
fn gpu_fakes() -> &'static std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = scratch("wcreport-gpu-fakes");
        util::build_gpu_fakes(&dir);
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
    std::fs::write(&merged, ok("stackmerge", &["--gpu-from", &p(&sym)], b"")).unwrap();
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
