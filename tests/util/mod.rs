//! Finds the built binaries and runs them with input piped in.

#![allow(dead_code)]

pub mod bpfstats;
pub mod browser;
pub mod cgroup;
pub mod gopprof;
pub mod postgres;
pub mod truth;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Directory of the built tools: `$WALLCLOCK_BIN_DIR`, else target/release.
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("WALLCLOCK_BIN_DIR") {
        return PathBuf::from(d);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"));
    target.join("release")
}

/// Path of a built tool; fails with the command that builds it.
pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(p.exists(), "{} is not built: run `cargo build --release --workspace` first", p.display());
    p
}

/// Run `name args` with `stdin` piped in.
pub fn run(name: &str, args: &[&str], stdin: &[u8]) -> Output {
    run_cmd(Command::new(bin(name)).args(args), stdin)
}

pub fn run_cmd(cmd: &mut Command, stdin: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let mut sin = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    // Write from a thread so a tool that writes before reading all cannot deadlock.
    let writer = std::thread::spawn(move || {
        let _ = sin.write_all(&data);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

/// Run and require success; returns stdout as text.
pub fn ok(name: &str, args: &[&str], stdin: &[u8]) -> String {
    let out = run(name, args, stdin);
    assert!(
        out.status.success(),
        "{name} {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// A file of `../shared/testdata`. Those inputs are written by other tools
/// and are not copied into the repository; without the folder the test
/// fails, saying so, unless WALLCLOCK_NO_TESTDATA=1 asks to skip.
pub fn testdata(rel: &str) -> Option<PathBuf> {
    let dir = root().join("../shared/testdata");
    if !dir.is_dir() {
        if std::env::var_os("WALLCLOCK_NO_TESTDATA").is_some() {
            skipped(&format!("{} is absent (WALLCLOCK_NO_TESTDATA set)", dir.display()));
            return None;
        }
        panic!("{} is absent: these tests read inputs written by other tools from there (set WALLCLOCK_NO_TESTDATA=1 to skip)", dir.display());
    }
    let p = dir.join(rel);
    assert!(p.exists(), "{} missing", p.display());
    Some(p)
}

/// Compile the ground-truth C program `src` (relative to the repository)
/// into `dir/name` with what frame-pointer unwinding needs: frame
/// pointers, no sibling calls (a function's last call would otherwise
/// become a jump and vanish from every stack), -pthread.
pub fn build_c(src: &str, dir: &Path, name: &str) -> PathBuf {
    build_c_with(src, dir, name, &["-O1", "-g", "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls", "-pthread"])
}

/// Compile the C program `src` (relative to the repository) into
/// `dir/name` with these gcc flags, unless `dir/name` is already that
/// build (see [`built_already`]).
pub fn build_c_with(src: &str, dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let out = dir.join(name);
    let said = dir.join(format!(".{name}.flags"));
    let flags_said = flags.join(" ");
    if built_already(&out, &said, &flags_said, &root().join(src)) {
        return out;
    }
    // Built under a name of its own, then renamed into place: two tests
    // of one binary building the same program at once must not write the
    // file the other is running (ETXTBSY).
    let tmp = dir.join(format!(".{name}.{}.{:?}", std::process::id(), std::thread::current().id()).replace(['(', ')'], ""));
    let st = Command::new("gcc")
        .args(flags)
        .arg("-o")
        .arg(&tmp)
        .arg(root().join(src))
        .status()
        .expect("gcc");
    assert!(st.success(), "building {src} failed");
    std::fs::rename(&tmp, &out).unwrap();
    std::fs::write(&said, flags_said).unwrap();
    out
}

/// Whether `out` was built with `flags` (as `said` records) after `src`,
/// the headers the programs share (tests/programs/common) and the
/// running test binary were last changed. Each test of the kernel
/// matrix's guests is a process of its own, and gcc takes 30 s there
/// under emulation: the guests (and the tests here) reuse one build.
fn built_already(out: &Path, said: &Path, flags: &str, src: &Path) -> bool {
    let changed = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(built) = changed(out) else { return false };
    if std::fs::read_to_string(said).ok().as_deref() != Some(flags) {
        return false;
    }
    let mut inputs = vec![src.to_path_buf()];
    inputs.extend(std::env::current_exe().ok());
    inputs.extend(std::fs::read_dir(root().join("tests/programs/common")).into_iter().flatten().flatten().map(|e| e.path()));
    inputs.iter().all(|p| changed(p).is_some_and(|t| t < built))
}

/// The demo workload (scripts/demo/workload.c: six threads that print
/// their own CPU and wall time per function), built into `dir`.
pub fn build_demo(dir: &Path) -> PathBuf {
    build_c("scripts/demo/workload.c", dir, "workload")
}

/// tests/programs/rustnames built into `dir` as users build Rust
/// programs (rustc's default linker), with v0 symbol mangling.
pub fn build_rustnames(dir: &Path) -> PathBuf {
    let out = dir.join("rustnames");
    let st = Command::new("rustc")
        .args(["-O", "-g", "-C", "symbol-mangling-version=v0", "-o"])
        .arg(&out)
        .arg(root().join("tests/programs/rustnames/main.rs"))
        .status()
        .expect("rustc");
    assert!(st.success(), "building rustnames failed");
    out
}

/// The fake CUDA stack of tests/programs/gpu built into `dir`: a fake
/// libcuda, libcudart and libcupti (records at CUPTI's real offsets) and
/// gpu_app, built without frame pointers (its launch functions are found
/// through .eh_frame). Returns gpu_app's path.
pub fn build_gpu_fakes(dir: &Path) -> PathBuf {
    let src = root().join("tests/programs/gpu");
    let gcc = |args: &[&str]| {
        let out = Command::new("gcc").args(args).current_dir(&src).output().expect("gcc is needed for the GPU tests");
        assert!(out.status.success(), "gcc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let d = dir.to_str().unwrap();
    let lib = |name: &str| format!("{d}/{name}");
    gcc(&["-shared", "-fPIC", "-O2", "-g", "-Wall", "-o", &lib("libcuda.so.1"), "-Wl,-soname,libcuda.so.1", "fake_cuda.c", "-ldl", "-lpthread"]);
    std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).unwrap();
    gcc(&["-shared", "-fPIC", "-O2", "-g", "-Wall", "-o", &lib("libcudart.so"), "fake_cudart.c", "-L", d, "-lcuda"]);
    gcc(&["-shared", "-fPIC", "-O2", "-g", "-Wall", "-o", &lib("libcupti.so.12"), "fake_cupti.c", "-ldl", "-lpthread"]);
    let rpath = format!("-Wl,-rpath,{d}");
    gcc(&["-O2", "-g", "-fomit-frame-pointer", "-fno-optimize-sibling-calls", "-Wall", "-o", &lib("gpu_app"), "gpu_app.c", "-L", d, "-lcudart", "-lcuda", &rpath]);
    dir.join("gpu_app")
}

/// The fake CUDA stack built once per test binary, into
/// target/test-tmp/`name` (the first call's): (dir, gpu_app's path).
pub fn gpu_fakes(name: &str) -> &'static (PathBuf, PathBuf) {
    static BUILT: std::sync::OnceLock<(PathBuf, PathBuf)> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = scratch(name);
        let app = build_gpu_fakes(&dir);
        (dir, app)
    })
}

/// `cmd` with no route to any real libcupti or CUDA.
pub fn without_cuda_env(mut cmd: Command) -> Command {
    for v in ["LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "PYTHONPATH", "WALLCLOCK_CUPTI_PATH", "CUDA_INJECTION64_PATH"] {
        cmd.env_remove(v);
    }
    cmd
}

/// A fresh scratch directory under target/test-tmp.
pub fn scratch(name: &str) -> PathBuf {
    let d = root().join("target/test-tmp").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { geteuid() == 0 }
}

/// Whether to skip a test that needs root (it loads BPF programs, reads
/// kernel addresses, writes system folders). Not root fails the test,
/// naming it, unless WALLCLOCK_SKIP_ROOT=1 asks to skip: a test that
/// returns early and passes would hide that nothing was checked.
pub fn skip_without_root(what: &str) -> bool {
    if is_root() {
        return false;
    }
    if std::env::var_os("WALLCLOCK_SKIP_ROOT").is_some_and(|v| v != "0" && !v.is_empty()) {
        skipped(&format!("{what} tests need root (WALLCLOCK_SKIP_ROOT set)"));
        return true;
    }
    panic!("{what} tests need root: run them as root (sudo scripts/test), or set WALLCLOCK_SKIP_ROOT=1 to skip them");
}

/// Record a skipped test: said on stderr (cargo test shows it only for
/// failures) and appended to the file `$WALLCLOCK_SKIP_LOG` names, which
/// scripts/test counts and prints at the end.
pub fn skipped(reason: &str) {
    let thread = std::thread::current();
    let test = thread.name().filter(|n| *n != "main").unwrap_or("?");
    let bin = std::env::args().next().map(|a| {
        let base = Path::new(&a).file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or(a);
        // target/release/deps/NAME-HASH: the binary is tests/NAME.rs.
        match base.rsplit_once('-') {
            Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => name.to_string(),
            _ => base,
        }
    });
    eprintln!("SKIPPED: {reason}");
    if let Some(log) = std::env::var_os("WALLCLOCK_SKIP_LOG") {
        let line = format!("{} {test}: {reason}\n", bin.unwrap_or_default());
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(log) {
            // One write per line: test threads append without interleaving.
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// An input a test needs is missing (a runtime, a tool, a build): the
/// test fails, saying what installs it, unless the environment variable
/// `opt_out` asks to skip (then counted as skipped). Returns true to skip.
pub fn missing(what: &str, installs: &str, opt_out: &str) -> bool {
    if std::env::var_os(opt_out).is_some_and(|v| v != "0" && !v.is_empty()) {
        skipped(&format!("{what} ({opt_out} set)"));
        return true;
    }
    panic!("{what}: {installs} (or set {opt_out}=1 to skip the tests that need it)");
}

extern "C" {
    fn geteuid() -> u32;
}

/// Golden-file compare: with WALLCLOCK_BLESS=1 the file is (re)written.
pub fn golden(rel: &str, actual: &str) {
    let p = root().join("tests/data").join(rel);
    if std::env::var_os("WALLCLOCK_BLESS").is_some() {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e} (run with WALLCLOCK_BLESS=1 to create)", p.display()));
    if expected != actual {
        let diff_at = expected.lines().zip(actual.lines()).position(|(a, b)| a != b);
        panic!(
            "{} differs (first differing line {:?}); rerun with WALLCLOCK_BLESS=1 if the change is intended.\n--- actual (head) ---\n{}",
            p.display(),
            diff_at.map(|i| i + 1),
            actual.lines().take(20).collect::<Vec<_>>().join("\n")
        );
    }
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}

/// `TOOL ARGS < input | head -1`: feed `input`, read one line of stdout,
/// close it. Returns (that line, exit status, stderr): a pipe-safe tool
/// exits 0 with nothing on stderr.
pub fn first_line_then_close(name: &str, args: &[&str], input: Vec<u8>) -> (String, std::process::ExitStatus, String) {
    use std::io::{BufRead, BufReader, Read};
    let mut child = Command::new(bin(name))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = sin.write_all(&input);
    });
    let mut first = String::new();
    {
        let mut r = BufReader::new(child.stdout.take().unwrap());
        r.read_line(&mut first).unwrap();
    } // stdout closed here, like `| head -1`
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let status = child.wait().unwrap();
    writer.join().unwrap();
    (first, status, err)
}

/// The stream `text` as JSON lines with every stack's frames written out:
/// the stack table (stream 1.3) resolved by the reader, as streams were
/// written before it. Outputs compared with this are the same records as
/// before, whatever the table's ids.
pub fn resolved(text: &str) -> String {
    let mut out = String::new();
    for r in wallclock_stream::Reader::new(text.as_bytes(), "resolved", Default::default()) {
        out.push_str(&serde_json::to_string(&r.expect("a valid stream")).unwrap());
        out.push('\n');
    }
    out
}

/// One figure of each thread's `thread` records in a stream, by tid: the
/// largest, where two tools wrote the thread (oncputime's record has no
/// off-CPU time, offcputime's has it all).
pub fn per_thread(stream: &str, figure: impl Fn(&wallclock_stream::Thread) -> u64) -> std::collections::BTreeMap<u32, u64> {
    let mut by_tid = std::collections::BTreeMap::new();
    for r in wallclock_stream::Reader::new(stream.as_bytes(), "per_thread", Default::default()) {
        if let wallclock_stream::Record::Thread(t) = r.expect("a valid stream") {
            let e = by_tid.entry(t.tid).or_insert(0);
            *e = figure(&t).max(*e);
        }
    }
    by_tid
}

/// What a loaded machine does to a thread that sleeps: a thread sleeps
/// 10 ms at a time and keeps the longest overshoot (the wait for a CPU
/// after the timer fired) until `stop`. Timing tests derive their margins
/// from it instead of a constant a busy machine can cross.
pub struct WakeLatency {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: std::thread::JoinHandle<std::time::Duration>,
}

impl WakeLatency {
    pub fn start() -> WakeLatency {
        use std::sync::atomic::Ordering;
        use std::time::{Duration, Instant};
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut worst = Duration::ZERO;
            while !s.load(Ordering::Relaxed) {
                let t = Instant::now();
                std::thread::sleep(Duration::from_millis(10));
                worst = worst.max(t.elapsed().saturating_sub(Duration::from_millis(10)));
            }
            worst
        });
        WakeLatency { stop, handle }
    }

    /// The longest wake-up delay seen since `start`.
    pub fn stop(self) -> std::time::Duration {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.join().unwrap()
    }
}

/// A thread taking `read()` every `period` until [`Poller::finish`],
/// which takes one more reading after the stop and returns them all in
/// order: a test's own clock beside a capture, read around its edges.
pub struct Poller<T> {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<T>>,
}

pub fn poll<T: Send + 'static>(period: std::time::Duration, read: impl Fn() -> T + Send + 'static) -> Poller<T> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let thread = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut v = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                v.push(read());
                std::thread::sleep(period);
            }
            v.push(read());
            v
        })
    };
    Poller { stop, thread }
}

impl<T> Poller<T> {
    pub fn finish(self) -> Vec<T> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}
