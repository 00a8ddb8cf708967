//! Tests of gputrace and the CUPTI injection library, without a GPU: a fake
//! libcupti (tests/programs/gpu/fake_cupti.c) delivers records at CUPTI's
//! real offsets through CUPTI's own calls, fake libcudart/libcuda run a
//! virtual GPU and log what it "ran" (the ground truth), and a test program
//! issues each kind of work from its own named function.

mod util;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use wallclock_stream::{Reader, ReaderOptions, Record, Stack};

fn fakes() -> &'static (PathBuf, PathBuf) {
    util::gpu_fakes("gpu-fakes")
}

fn clean(cmd: Command) -> Command {
    util::without_cuda_env(cmd)
}

/// gputrace -o OUT -- gpu_app ARGS with the fake libcupti; (output, stream, truth).
fn traced(name: &str, args: &[&str], env: &[(&str, &str)]) -> (Output, Vec<Record>, String) {
    let (dir, app) = fakes();
    let work = util::scratch(name);
    let out_path = work.join("out.jsonl");
    let truth = work.join("truth.txt");
    let mut cmd = clean(Command::new(util::bin("gputrace")));
    cmd.arg("-o").arg(&out_path).arg("--").arg(app).args(args);
    cmd.env("WALLCLOCK_CUPTI_PATH", dir.join("libcupti.so.12")).env("FAKECUDA_TRUTH", &truth);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = std::fs::read_to_string(&out_path).unwrap_or_default();
    let recs = Reader::new(text.as_bytes(), "out.jsonl", ReaderOptions::default()).collect::<Result<Vec<_>, _>>().expect("a valid stream");
    (out, recs, std::fs::read_to_string(&truth).unwrap_or_default())
}

fn gpu_stacks(recs: &[Record]) -> Vec<&Stack> {
    recs.iter().filter_map(|r| if let Record::Stack(s) = r { Some(s) } else { None }).collect()
}

fn stats(recs: &[Record]) -> BTreeMap<String, u64> {
    match recs.last() {
        Some(Record::Stats(s)) => s.counts.clone(),
        other => panic!("stream does not end with stats: {other:?}"),
    }
}

/// The program's functions from `nm`: (address, name), sorted.
fn symbols(app: &Path) -> Vec<(u64, String)> {
    let out = Command::new("nm").arg("--defined-only").arg(app).output().expect("nm is needed");
    let mut v: Vec<(u64, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && (f[1] == "T" || f[1] == "t")).then(|| (u64::from_str_radix(f[0], 16).unwrap(), f[2].to_string()))
        })
        .collect();
    v.sort();
    v
}

/// The program's own frames of a stack, leaf first, named through the
/// Maps record and nm (independent of stacksym).
fn app_frames(s: &Stack, recs: &[Record], app: &Path, syms: &[(u64, String)]) -> Vec<String> {
    let maps = recs
        .iter()
        .find_map(|r| if let Record::Maps(m) = r { (m.pid == s.pid).then_some(m) } else { None })
        .expect("a Maps record for the process");
    let app = app.to_str().unwrap();
    let n = s.ustack.len();
    let mut out = Vec::new();
    for (i, &a) in s.ustack.iter().enumerate().rev() {
        // Return addresses point after the call; the leaf is already inside it.
        let a = if i + 1 == n { a } else { a - 1 };
        let Some(m) = maps.maps.iter().find(|m| a >= m.start && a < m.end && m.path == app) else { continue };
        let vaddr = a - m.start + m.offset;
        if let Some((_, name)) = syms.iter().rev().find(|(s, _)| *s <= vaddr) {
            out.push(name.clone());
        }
    }
    out
}

/// (mangled name in the truth, name in the stream, function that launched it).
const EXPECTED: &[(&str, &str, &str)] = &[
    ("_Z4gemmPKfS0_Pfi", "gemm(float const*, float const*, float*, int)", "launch_gemm"),
    ("_Z4reluPfi", "relu(float*, int)", "launch_relu"),
    ("scale_kernel", "scale_kernel", "launch_scale"),
    ("_Z8add_biasPfPKfi", "add_bias(float*, float const*, int)", "run_graph"),
    ("_Z7softmaxPfi", "softmax(float*, int)", "run_graph"),
    ("HtoD", "[memcpy HtoD]", "copy_in"),
    ("DtoH", "[memcpy DtoH]", "copy_out"),
    ("-memset", "[memset]", "clear_buf"),
    ("-sync", "[sync device]", "wait_gpu"),
];

/// Truth sums by (mangled/copy name): (ns, count).
fn truth_sums(truth: &str) -> BTreeMap<String, (u64, u64)> {
    let mut m: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for l in truth.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let key = match f[0] {
            "memset" => "-memset".to_string(),
            "sync" => "-sync".to_string(),
            _ => f[2].to_string(),
        };
        let e = m.entry(key).or_default();
        e.0 += f[3].parse::<u64>().unwrap();
        e.1 += 1;
    }
    m
}

#[test]
fn each_kernel_is_under_the_function_that_launched_it_with_its_exact_time() {
    let (_, app) = fakes();
    let (out, recs, truth) = traced("gpu-attribution", &["7"], &[]);
    assert_eq!(out.status.code(), Some(3), "gputrace exits with the program's code; stderr: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "iterations 7 checksum 6290432\n", "with -o the program's stdout is its own");
    let syms = symbols(app);
    let sums = truth_sums(&truth);
    assert!(sums.len() == EXPECTED.len(), "the fake ran every kind of work: {sums:?}");
    let stacks = gpu_stacks(&recs);
    let mut got: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for s in &stacks {
        let g = s.gpu.as_ref().expect("gpu info");
        let frames = app_frames(s, &recs, app, &syms);
        assert!(!frames.is_empty(), "{:?} has no frame of the program: {:?}", g.name, s.ustack);
        assert!(frames.iter().any(|f| f == "main"), "the stack reaches main: {frames:?}");
        let e = got.entry((g.name.clone().unwrap(), frames[0].clone())).or_default();
        e.0 += s.ns;
        e.1 += s.count;
    }
    for (truth_key, name, func) in EXPECTED {
        let want = sums[*truth_key];
        let have = got.remove(&(name.to_string(), func.to_string()));
        assert_eq!(have, Some(want), "{name} under {func}: (ns, count) in the stream vs the fake's truth");
    }
    assert!(got.is_empty(), "activities under an unexpected function: {got:?}");

    let counts = stats(&recs);
    assert_eq!(counts.get("gpu_unmatched"), None, "no activity without its launch stack");
    let total: u64 = stacks.iter().map(|s| s.ns).sum();
    let truth_total: u64 = sums.values().map(|v| v.0).sum();
    assert_eq!(total, truth_total, "all GPU time is accounted for");
    let kernel_truth: u64 = truth.lines().filter(|l| l.starts_with("kernel")).map(|l| l.split(' ').nth(3).unwrap().parse::<u64>().unwrap()).sum();
    assert_eq!(counts["gpu_kernel_ns"], kernel_truth);
    assert_eq!(counts["gpu_kernel_count"], truth.lines().filter(|l| l.starts_with("kernel")).count() as u64);
    // Every launch that reached the GPU has a launch delay; syncs have none.
    for s in &stacks {
        let g = s.gpu.as_ref().unwrap();
        assert_eq!(g.launch_delay_ns.is_some(), g.activity != "sync", "{:?}", g);
    }
    match &recs[0] {
        Record::Header(h) => {
            assert_eq!(h.tool, "gputrace");
            assert!(h.start_ns.unwrap() < h.end_ns.unwrap());
            // GPU timestamps are on the same CLOCK_MONOTONIC as the window.
            assert!(counts.contains_key("gpu_cupti_overhead_ns"));
        }
        r => panic!("first record {r:?}"),
    }
}

/// Runs the program directly, untouched.
fn unprofiled(args: &[&str]) -> Output {
    clean(Command::new(&fakes().1)).args(args).output().unwrap()
}

fn assert_one_warning_and_untouched(name: &str, env: &[(&str, &str)]) {
    let plain = unprofiled(&["4"]);
    let (out, recs, _) = traced(name, &["4"], env);
    assert_eq!(out.stdout, plain.stdout, "the program's output is unchanged");
    assert_eq!(out.status.code(), plain.status.code(), "exit code unchanged");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "exactly one warning line, got:\n{err}");
    assert!(err.contains("warning") && err.contains("unprofiled"), "{err}");
    assert!(gpu_stacks(&recs).is_empty());
    assert_eq!(stats(&recs).get("gpu_cupti_unavailable"), Some(&1));
}

#[test]
fn missing_libcupti_leaves_the_program_untouched_with_one_warning() {
    assert_one_warning_and_untouched("gpu-missing", &[("WALLCLOCK_CUPTI_PATH", "/nonexistent/libcupti.so.12")]);
}

#[test]
fn too_old_libcupti_leaves_the_program_untouched_with_one_warning() {
    assert_one_warning_and_untouched("gpu-old", &[("FAKE_CUPTI_VERSION", "9")]);
}

#[test]
fn stream_on_stdout_never_mixes_with_the_programs_output() {
    let (dir, app) = fakes();
    let mut cmd = clean(Command::new(util::bin("gputrace")));
    cmd.arg("--").arg(app).arg("2").env("WALLCLOCK_CUPTI_PATH", dir.join("libcupti.so.12"));
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8(out.stdout).unwrap();
    let recs: Vec<Record> = Reader::new(text.as_bytes(), "stdout", ReaderOptions::default()).collect::<Result<_, _>>().expect("stdout is only the stream");
    assert!(matches!(recs[0], Record::Header(_)));
    assert!(!gpu_stacks(&recs).is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("iterations 2 checksum"), "the program's stdout went to stderr");
}

#[test]
fn dropped_records_are_counted() {
    let (out, recs, truth) = traced("gpu-dropped", &["5"], &[("FAKE_CUPTI_DROP", "2")]);
    assert_eq!(out.status.code(), Some(3));
    let counts = stats(&recs);
    assert_eq!(counts.get("gpu_records_dropped"), Some(&2));
    let kernels = truth.lines().filter(|l| l.starts_with("kernel")).count() as u64;
    assert_eq!(counts["gpu_kernel_count"], kernels - 2);
    match &recs[0] {
        Record::Header(h) => assert_eq!(h.lost.get("gpu_records_dropped"), Some(&2)),
        r => panic!("{r:?}"),
    }
}

fn launch_ns(env: &[(&str, &str)], inject: bool) -> f64 {
    let (dir, app) = fakes();
    let work = util::scratch("gpu-bench");
    let mut best = f64::MAX;
    for _ in 0..3 {
        let mut cmd = clean(Command::new(app));
        cmd.args(["bench", "20000"]);
        if inject {
            cmd.env("CUDA_INJECTION64_PATH", util::bin("libcupti_inject.so"))
                .env("WALLCLOCK_GPUTRACE_DIR", &work)
                .env("WALLCLOCK_CUPTI_PATH", dir.join("libcupti.so.12"));
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let v: f64 = err.lines().find_map(|l| l.strip_prefix("launch_ns ")).expect("bench output").parse().unwrap();
        best = best.min(v);
    }
    best
}

/// Measures (and prints) what a launch costs: the fake's own CUPTI work,
/// and the stack capture on top. Run with --nocapture to see the figures.
#[test]
fn launch_cost_is_measured() {
    let bare = launch_ns(&[], false);
    let no_stacks = launch_ns(&[("WALLCLOCK_GPU_STACKS", "0")], true);
    let stacks = launch_ns(&[], true);
    eprintln!("launch cost: bare {bare:.0} ns; with CUPTI records, no stacks {no_stacks:.0} ns; with launch stacks {stacks:.0} ns (stack capture {:.0} ns per launch)", stacks - no_stacks);
    assert!(stacks < 200_000.0, "a launch under the injection costs {stacks} ns");
}

/// With stacksym built, its frames name the same launch functions and the
/// GPU leaf survives symbolization.
#[test]
fn stacksym_names_the_launch_functions() {
    util::bin("stacksym");
    let (_, recs, _) = traced("gpu-stacksym", &["3"], &[]);
    let mut text = Vec::new();
    let mut w = wallclock_stream::Writer::new(&mut text);
    for r in &recs {
        w.write(r).unwrap();
    }
    let out = util::run("stacksym", &[], &text);
    assert!(out.status.success(), "stacksym: {}", String::from_utf8_lossy(&out.stderr));
    let sym: Vec<Record> = Reader::new(&out.stdout[..], "stacksym", ReaderOptions::default()).collect::<Result<_, _>>().unwrap();
    for s in gpu_stacks(&sym) {
        let g = s.gpu.as_ref().expect("stacksym keeps gpu info");
        let (_, _, func) = EXPECTED.iter().find(|e| Some(e.1) == g.name.as_deref()).expect("stacksym keeps gpu.name");
        assert!(s.frames.iter().any(|f| f.func == *func), "{:?} under {func}: {:?}", g.name, s.frames);
    }
}

/// `scripts/wallclock --gpu`: the GPU kernels sit in the combined folded
/// file under the CPU functions that launched them, marked `_[g]`, with
/// the fake GPU's own times, beside the program's on- and off-CPU time.
#[test]
fn wallclock_gpu_mode_puts_kernels_under_their_launchers() {
    if util::skip_without_root("gpu") {
        return;
    }
    let (dir, app) = fakes();
    let work = util::scratch("gpu-wallclock");
    let truth = work.join("truth.txt");
    let prefix = work.join("g");
    let mut cmd = clean(Command::new("bash"));
    cmd.arg(util::root().join("scripts/wallclock"))
        .args(["--gpu", "--prefix", prefix.to_str().unwrap(), "--"])
        .arg(app)
        .arg("7")
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .env("WALLCLOCK_CUPTI_PATH", dir.join("libcupti.so.12"))
        .env("FAKECUDA_TRUTH", &truth);
    let out = cmd.output().unwrap();
    // gpu_app exits with 3: wallclock passes it on.
    assert_eq!(out.status.code(), Some(3), "wallclock --gpu: {}", String::from_utf8_lossy(&out.stderr));
    let folded = std::fs::read_to_string(work.join("g.folded")).unwrap();
    let sums = truth_sums(&std::fs::read_to_string(&truth).unwrap());
    for (key, shown, launcher) in EXPECTED {
        if *key == "-sync" {
            continue; // the CPU's wait: GPU-side it is no kernel
        }
        let (ns, _) = sums[*key];
        let got_us: u64 = folded
            .lines()
            .filter_map(|l| l.rsplit_once(' '))
            .filter(|(s, _)| s.ends_with(&format!("{shown}_[g]")) && s.contains(&format!(";{launcher};")))
            .map(|(_, v)| v.parse::<u64>().unwrap())
            .sum();
        // Folded values are µs, each line rounded once.
        let lines = folded.lines().filter(|l| l.contains(&format!("{shown}_[g]"))).count() as u64;
        assert!(got_us.abs_diff(ns / 1000) <= lines.max(1), "{shown} under {launcher}: {got_us} us, truth {} us", ns / 1000);
    }
    assert!(folded.lines().any(|l| l.rsplit_once(' ').unwrap().0.ends_with("_[c]") || l.rsplit_once(' ').unwrap().0.ends_with("_[o]")),
        "the CPU side is in the same picture");
}
