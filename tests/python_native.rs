//! Python and native frames in the order they called each other through a
//! pybind11 extension (issue 30.5: PyTorch's shape without PyTorch),
//! profiled end to end as root (`scripts/wallclock -- python train.py`).
//! The extension (tests/programs/python_native/driver.cpp) is built here
//! with g++ and pybind11's headers (pybind11 from PyPI in
//! target/venv-numpy, `scripts/setup --tests`) and copied into 40
//! packages, which the training loop imports lazily (PEP 562): 40 loaded
//! files with one base name.
//!
//! Its backward step calls a Python hook from under 96K of C++ stack, more
//! than the 64K the capture copies: the native unwind of the hook's stacks
//! stops inside the extension, short of the `_PyEval_EvalFrameDefault`
//! frames that ran the training loop. Those Python frames went above the
//! innermost one found, leafward of the C++ they had called (86% of the
//! thread's time had extension frames rootward of `py::train` in an 8 s capture); they now
//! go at the root, then `[truncated]`, then what the unwind saw.

mod util;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const SO: &str = "driver.cpython-311-x86_64-linux-gnu.so";

/// The extension's frames: their module names the file (`pN/` before its
/// base name, which 40 loaded files share).
fn extension(f: &Value) -> bool {
    f["module"].as_str().is_some_and(|m| m.ends_with(SO))
}

fn build(dir: &Path, python: &Path) -> bool {
    let includes = Command::new(python).args(["-m", "pybind11", "--includes"]).output().expect("run python -m pybind11");
    assert!(includes.status.success(), "pybind11 is missing from target/venv-numpy: run scripts/setup --tests");
    let includes = String::from_utf8(includes.stdout).unwrap();
    let so = dir.join(SO);
    let out = Command::new("g++")
        .args(["-O2", "-fno-optimize-sibling-calls", "-shared", "-fPIC", "-std=c++17"])
        .args(includes.split_whitespace())
        .arg(util::root().join("tests/programs/python_native/driver.cpp"))
        .arg("-o")
        .arg(&so)
        .output()
        .expect("run g++");
    assert!(out.status.success(), "g++ failed: {}", String::from_utf8_lossy(&out.stderr));
    for i in 0..40 {
        let p = dir.join(format!("p{i}"));
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("__init__.py"), "").unwrap();
        std::fs::copy(&so, p.join(so.file_name().unwrap())).unwrap();
    }
    std::fs::copy(util::root().join("tests/programs/python_native/hooks.py"), dir.join("hooks.py")).unwrap();
    true
}

#[test]
fn python_frames_stay_rootward_of_the_native_code_they_call() {
    if util::skip_without_root("pybind11 capture") {
        return;
    }
    let python = util::root().join("target/venv-numpy/bin/python");
    assert!(python.exists(), "{} is missing: run scripts/setup --tests", python.display());
    let dir = util::scratch("python_native");
    build(&dir, &python);
    let (tidfile, prefix) = (dir.join("tid"), dir.join("p"));
    let out = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["-F", "199", "--prefix"])
        .arg(&prefix)
        .arg("--")
        .arg(&python)
        .arg(util::root().join("tests/programs/python_native/train.py"))
        .arg("6")
        .arg(&tidfile)
        .arg(&dir)
        .arg("40")
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .env_remove("PYTHONPERFSUPPORT")
        .output()
        .expect("run scripts/wallclock");
    assert!(out.status.success(), "wallclock failed: {}", String::from_utf8_lossy(&out.stderr));
    let tid: u64 = std::fs::read_to_string(&tidfile).unwrap().trim().parse().unwrap();

    let stream = util::resolved(&std::fs::read_to_string(prefix.with_extension("stream")).unwrap());
    let (mut all, mut native_root, mut hook_deep, mut hook_deep_marked) = (0u64, 0u64, 0u64, 0u64);
    let mut worst: (u64, String) = (0, String::new());
    let mut modules = std::collections::BTreeSet::new();
    for r in stream.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()) {
        if r["type"] != "stack" || r["tid"].as_u64() != Some(tid) {
            continue;
        }
        let frames = r["frames"].as_array().unwrap();
        let names: Vec<&str> = frames.iter().map(|f| f["func"].as_str().unwrap_or("")).collect();
        if matches!(names.first(), Some(&"[steal]") | Some(&"[thread start]")) {
            continue;
        }
        let ns = r["ns"].as_u64().unwrap();
        all += ns;
        for m in frames.iter().filter(|f| extension(f)).filter_map(|f| f["module"].as_str()) {
            modules.insert(m.to_string());
        }
        let is_py = |n: &&str| n.starts_with("py::");
        let Some(first_py) = names.iter().position(is_py) else { continue };
        // Native code rootward of the Python frames that called it: a
        // frame of the extension, or a root that is no stack's start.
        let root_ok = matches!(names[0], "clone3" | "[truncated]") || is_py(&names[0]);
        if !root_ok || frames[..first_py].iter().any(extension) {
            native_root += ns;
            if ns > worst.0 {
                worst = (ns, names.join(";"));
            }
        }
        // The hook under the deep C++ stack: the training loop's frames,
        // then the cut, then the extension, then the hook.
        let (Some(train), Some(hook)) = (names.iter().position(|n| n.starts_with("py::train:")), names.iter().position(|n| n.starts_with("py::hook:"))) else {
            continue;
        };
        if let Some(deep) = names.iter().position(|n| n.starts_with("descend(")) {
            hook_deep += ns;
            if names.iter().position(|&n| n == "[truncated]").is_some_and(|c| train < c && c < deep) && deep < hook {
                hook_deep_marked += ns;
            }
        }
    }
    assert!(all > 0, "thread {tid} is in no stack");
    let pct = |x: u64| x as f64 * 100.0 / all as f64;
    eprintln!(
        "thread {tid}: {:.2}% with native code rootward of its Python callers; hook under the C++ stack {:.1}% ({:.1}% with the cut marked between py::train and it)",
        pct(native_root),
        pct(hook_deep),
        pct(hook_deep_marked)
    );
    assert_eq!(native_root, 0, "{:.2}% of the time has native code rootward of the Python frames that called it, the most: {} ns {}", pct(native_root), worst.0, worst.1);
    assert!(pct(hook_deep) >= 20.0, "the hook under the deep C++ stack is only {:.1}% of the thread's time", pct(hook_deep));
    assert_eq!(hook_deep_marked, hook_deep, "a hook stack without [truncated] between py::train and the extension");
    // 40 files of one base name, told apart by their package's directory.
    assert!(modules.contains(&format!("p0/{SO}")), "the training loop's own copy is not p0/{SO}: {modules:?}");
    assert!(modules.iter().all(|m| m.strip_suffix(SO).is_some_and(|d| d.starts_with('p') && d.ends_with('/'))), "extension frames not told apart by their directory: {modules:?}");
}
