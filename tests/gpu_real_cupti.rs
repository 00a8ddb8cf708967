//! NVIDIA's real libcupti.so.12 (PyPI `nvidia-cuda-cupti-cu12`, installed
//! under target/cuda by `scripts/setup --tests`) on a machine with no
//! NVIDIA driver: loaded into a program by the fake CUDA driver (which
//! calls InitializeInjection as the real one does), it refuses to enable
//! activity; the program must run exactly as without gputrace, and
//! gputrace must say why, once, in one line.

mod util;

use std::path::PathBuf;
use std::process::Command;

use wallclock_stream::{Reader, ReaderOptions, Record};

fn real_cupti() -> PathBuf {
    let p = util::root().join("target/cuda/nvidia/cuda_cupti/lib/libcupti.so.12");
    assert!(p.exists(), "{} is missing: run scripts/setup --tests (it installs PyPI's nvidia-cuda-cupti-cu12 there)", p.display());
    p
}

fn clean(mut cmd: Command) -> Command {
    for v in ["LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "PYTHONPATH", "WALLCLOCK_CUPTI_PATH", "CUDA_INJECTION64_PATH"] {
        cmd.env_remove(v);
    }
    cmd
}

#[test]
fn real_libcupti_without_a_driver_leaves_the_program_untouched_and_says_why_once() {
    let cupti = real_cupti();
    if std::path::Path::new("/dev/nvidia0").exists() {
        util::skipped("this machine has an NVIDIA GPU; scripts/gpu-check covers it");
        return;
    }
    let dir = util::scratch("gpu-real-fakes");
    let app = util::build_gpu_fakes(&dir);
    let plain = clean(Command::new(&app)).arg("4").output().unwrap();
    let work = util::scratch("gpu-real");
    let out_path = work.join("out.jsonl");
    let out = clean(Command::new(util::bin("gputrace")))
        .arg("--cupti")
        .arg(&cupti)
        .arg("-o")
        .arg(&out_path)
        .arg("--")
        .arg(&app)
        .arg("4")
        .output()
        .unwrap();
    assert_eq!(out.stdout, plain.stdout, "the program's output is unchanged");
    assert_eq!(out.status.code(), plain.status.code(), "its exit status is unchanged");
    assert_eq!(plain.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "exactly one line on stderr, got:\n{err}");
    assert!(lines[0].starts_with("gputrace: warning: no GPU activity recorded: "), "{err}");
    assert!(lines[0].contains("CUPTI_ERROR_NOT_INITIALIZED") && lines[0].contains("no NVIDIA driver"), "says why: {err}");
    let text = std::fs::read_to_string(&out_path).unwrap();
    let recs: Vec<Record> = Reader::new(text.as_bytes(), "out", ReaderOptions::default()).collect::<Result<_, _>>().unwrap();
    assert!(!recs.iter().any(|r| matches!(r, Record::Stack(_))), "no GPU records");
    match recs.last() {
        Some(Record::Stats(s)) => assert_eq!(s.counts.get("gpu_cupti_unavailable"), Some(&1)),
        r => panic!("stream ends with {r:?}"),
    }
}
