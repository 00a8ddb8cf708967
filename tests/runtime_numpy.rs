//! numpy under Debian's python3 profiled end to end (`scripts/wallclock --
//! python matmul.py`), as root: matrix products (`np.dot` and `@`, OpenBLAS
//! dgemm) in a thread (tests/programs/numpy/matmul.py), with numpy from
//! PyPI in target/venv-numpy (`scripts/setup --tests`). The native frames
//! of the extension must stay where they ran, leafward of the Python
//! frames that called them, and the thread's stacks must be whole, from
//! `clone3`, through OpenBLAS's 12K frames and its assembly kernel that
//! has no unwind table.

mod util;

use std::process::Command;

use serde_json::Value;

/// Code of the extension: numpy's core module and the OpenBLAS it brings
/// (numpy.libs/libscipy_openblas64_-*.so); frames name their module by
/// its file name.
fn extension(f: &Value) -> bool {
    f["module"].as_str().is_some_and(|m| m.starts_with("_multiarray_umath") || m.contains("openblas"))
}

/// What one capture of the matmul thread shows: its time, the part
/// rooted at clone3, with numpy under a Python frame, with numpy above
/// one; the Python functions that called numpy; the largest unrooted stack.
struct Seen {
    all: u64,
    rooted: u64,
    under: u64,
    misplaced: u64,
    callers: std::collections::HashSet<String>,
    worst: (u64, String),
}

impl Seen {
    fn pct(&self, x: u64) -> f64 {
        x as f64 * 100.0 / self.all as f64
    }
}

#[test]
fn numpy_frames_stay_under_their_python_callers() {
    let Some(s) = seen() else { return };
    assert_eq!(s.misplaced, 0, "numpy/OpenBLAS frames rootward of a Python frame");
    // The products run in the extension, called from both functions.
    assert!(s.pct(s.under) >= 50.0, "only {:.1}% of the thread's time in numpy under Python", s.pct(s.under));
    for f in ["dot_product", "at_product"] {
        assert!(s.callers.contains(f), "{f} never calls numpy in the stacks: {:?}", s.callers);
    }
}

// The leaf scan for OpenBLAS's assembly kernel (no unwind rule) took
// stale return addresses left in its 28K frame by earlier calls
// (`_dl_map_object_from_fd;_dl_new_object;__GI___libc_malloc;_int_malloc;
// dgemm_kernel_HASWELL`, 55-63% rooted at clone3) until it kept only
// calls that may have entered the leaf's function (leafscan.rs).
#[test]
fn numpy_thread_stacks_reach_clone3() {
    let Some(s) = seen() else { return };
    assert!(s.pct(s.rooted) >= 95.0, "{:.1}% rooted at clone3; the largest stack not: {} ns {}", s.pct(s.rooted), s.worst.0, s.worst.1);
}

/// One capture for both tests: two at once would share the machine's two
/// cores with each other's OpenBLAS threads.
fn seen() -> Option<&'static Seen> {
    static SEEN: std::sync::OnceLock<Option<Seen>> = std::sync::OnceLock::new();
    SEEN.get_or_init(capture).as_ref()
}

fn capture() -> Option<Seen> {
    if util::skip_without_root("numpy capture") {
        return None;
    }
    let python = util::root().join("target/venv-numpy/bin/python");
    assert!(python.exists(), "{} is missing: run scripts/setup --tests (numpy from PyPI in a venv of Debian's python3)", python.display());
    let dir = util::scratch("runtime_numpy");
    let (tidfile, prefix) = (dir.join("tid"), dir.join("p"));
    let out = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["-F", "199", "--prefix"])
        .arg(&prefix)
        .arg("--")
        .arg(&python)
        .arg(util::root().join("tests/programs/numpy/matmul.py"))
        .arg("3")
        .arg(&tidfile)
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .env_remove("PYTHONPERFSUPPORT")
        .output()
        .expect("run scripts/wallclock");
    assert!(out.status.success(), "wallclock failed: {}", String::from_utf8_lossy(&out.stderr));
    let tid: u64 = std::fs::read_to_string(&tidfile).unwrap().trim().parse().unwrap();

    let stream = util::resolved(&std::fs::read_to_string(prefix.with_extension("stream")).unwrap());
    let (mut all, mut rooted, mut under, mut misplaced) = (0u64, 0u64, 0u64, 0u64);
    let mut callers = std::collections::HashSet::new();
    let mut worst: (u64, String) = (0, String::new());
    for r in stream.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()) {
        if r["type"] != "stack" || r["tid"].as_u64() != Some(tid) {
            continue;
        }
        let frames = r["frames"].as_array().unwrap();
        let names: Vec<&str> = frames.iter().map(|f| f["func"].as_str().unwrap_or("")).collect();
        // Synthetic stacks hold time in no code: steal, a thread's wait
        // for its first run.
        if matches!(names.first(), Some(&"[steal]") | Some(&"[thread start]")) {
            continue;
        }
        let ns = r["ns"].as_u64().unwrap();
        all += ns;
        if names.first() == Some(&"clone3") {
            rooted += ns;
        } else if ns > worst.0 {
            worst = (ns, names.join(";"));
        }
        let Some(first_py) = names.iter().position(|n| n.starts_with("py::")) else { continue };
        let last_py = names.iter().rposition(|n| n.starts_with("py::")).unwrap();
        // No code of the extension rootward of the first Python frame:
        // numpy and OpenBLAS run only when Python calls them.
        if frames[..first_py].iter().any(extension) {
            misplaced += ns;
        }
        if frames[last_py..].iter().any(extension) {
            under += ns;
            callers.insert(names[last_py].trim_start_matches("py::").split(':').next().unwrap().to_string());
        }
    }
    assert!(all > 0, "thread {tid} is in no stack");
    let seen = Seen { all, rooted, under, misplaced, callers, worst };
    eprintln!(
        "thread {tid}: {:.1}% rooted at clone3, {:.1}% with numpy/OpenBLAS under a Python frame, {:.1}% with one above; callers {:?}",
        seen.pct(rooted),
        seen.pct(under),
        seen.pct(misplaced),
        seen.callers
    );
    Some(seen)
}
