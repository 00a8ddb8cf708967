//! gputrace: runs a CUDA program with the CUPTI injection library and
//! writes its GPU activity as a wallclock stream.
//!
//! ```text
//! gputrace [-o FILE] [--gpu-only | --cpu-only | --merge] -- COMMAND [ARGS...]
//! gputrace [-o FILE] -p PID [-d SECONDS]
//! {"type":"header","format":"wallclock",...,"tool":"gputrace","pids":[4242],...}
//! {"type":"maps","pid":4242,"maps":[...]}
//! {"type":"stack","kind":"gpu","pid":4242,"tid":4242,"comm":"python","ustack":[...],"ns":5120000,"count":80,
//!  "gpu":{"activity":"kernel","device":0,"stream":7,"launch_delay_ns":912000,"name":"gemm(float*, int)"}}
//! {"type":"stats","end_ns":...,"counts":{"gpu_kernels":80,"gpu_kernel_ns":5120000,...}}
//! ```
//!
//! Each `gpu` record sums one activity (`kernel`, `memcpy`, `memset`, or
//! `sync`: CPU time spent waiting in a synchronizing call) under the raw
//! launch stack (`ustack`, root first) of the outermost API call that
//! issued it; `gpu.name` is the GPU leaf (demangled kernel name). Run the
//! stream through `stacksym` to name the CPU frames.

pub mod attach;
pub mod collect;
pub mod inject;

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{ArgGroup, Parser};
use wallclock_capture::launch::spawn_held_env;
use wallclock_capture::target::monotonic_ns;
use wallclock_stream::{Header, Reader, ReaderOptions, Record, Stats, Writer};

const EXAMPLES: &str = "EXAMPLES:
    gputrace -o gpu.jsonl -- python train.py      GPU kernels under their launch stacks
    gputrace -- ./app | stacksym | flame > gpu.svg
    gputrace --merge -o all.jsonl -- ./app        plus on-CPU samples (oncputime, needs root)
    gputrace -p 4242 -d 10 -o gpu.jsonl           10 s of a running CUDA process (ptrace, x86-64)
    WALLCLOCK_CUPTI_PATH=/opt/cuda/extras/CUPTI/lib64/libcupti.so gputrace -- ./app

ENVIRONMENT:
    WALLCLOCK_CUPTI_PATH     libcupti to use (file or folder); else the CUDA toolkit,
                             the nvidia-cuda-cupti Python package, LD_LIBRARY_PATH
    WALLCLOCK_GPU_FLUSH_MS   activity-buffer flush period (default 1000)
    WALLCLOCK_GPU_STACKS=0   record no launch stacks (to measure their cost)

FILES OF THE TARGET:
    With -p, the capture folder is made in the process's /tmp opened with
    no symbolic link on the way (openat2 in its root); the library's file
    there must be a regular file of the process's user, read up to 1 GiB;
    the libraries read for dlopen's address (its libc) are opened in its
    root with no link followed and read up to 1 GiB. Past a bound the file
    is skipped, said on stderr.";

#[derive(Parser, Debug)]
#[command(
    name = "gputrace",
    version,
    about = "Trace a CUDA program's GPU kernels, copies and synchronizations under the CPU stacks that launched them",
    after_help = EXAMPLES,
    group(ArgGroup::new("mode").args(["gpu_only", "cpu_only", "merge"]))
)]
pub struct Cli {
    /// Write the stream here instead of stdout. With stdout, the program's
    /// own stdout goes to stderr so that it never mixes into the stream.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// GPU activity only (the default for now).
    #[arg(long)]
    pub gpu_only: bool,
    /// On-CPU samples only, through `oncputime -p PID` (no CUPTI).
    #[arg(long)]
    pub cpu_only: bool,
    /// GPU activity plus on-CPU samples of the same process (`oncputime`).
    #[arg(long)]
    pub merge: bool,
    /// On-CPU sampling frequency passed to oncputime (Hz; 49 as in every
    /// tool).
    #[arg(short = 'F', long = "frequency", alias = "freq", default_value_t = 49, value_name = "HZ")]
    pub freq: u64,
    /// The CUPTI injection library (default: libcupti_inject.so beside gputrace, else in ../lib/wallclock/).
    #[arg(long, value_name = "PATH")]
    pub inject: Option<PathBuf>,
    /// libcupti to load (sets WALLCLOCK_CUPTI_PATH for the program).
    #[arg(long, value_name = "PATH")]
    pub cupti: Option<PathBuf>,
    /// Also write each GPU activity with its start and end (a `slice`
    /// record of kind gpu, under the launch stack: wallclock-stream(5)),
    /// for `wcexport --trace`.
    #[arg(long)]
    pub timeline: bool,
    /// Attach to this running CUDA process instead of starting one: the
    /// injection library is loaded into it through ptrace (x86-64), CUPTI
    /// records for the window, then lets go; the process runs on. Work
    /// launched by a call entered before the window is not written (counted
    /// as gpu_launched_before_window); one entered before the stop is.
    #[arg(short, long, value_name = "PID", conflicts_with_all = ["command", "cpu_only", "merge"])]
    pub pid: Option<u32>,
    /// With -p: the window in seconds (default: until Ctrl-C).
    #[arg(short, long, value_name = "SECONDS", requires = "pid")]
    pub duration: Option<f64>,
    /// The program and its arguments.
    #[arg(last = true, required_unless_present = "pid", value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// The clap command (for man pages and completions).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// A companion file: beside this binary (the build tree), else in
/// `../lib/wallclock/` from it (where scripts/install puts it).
fn beside_me(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    let installed = dir.parent()?.join("lib/wallclock").join(name);
    let beside = dir.join(name);
    Some(if !beside.exists() && installed.exists() { installed } else { beside })
}

/// Runs the program; returns its exit code (128 + signal when killed).
pub fn run(cli: &Cli) -> Result<i32> {
    let gpu = !cli.cpu_only;
    let cpu = cli.cpu_only || cli.merge;
    let inject = match (&cli.inject, std::env::var_os("WALLCLOCK_CUPTI_INJECT")) {
        (Some(p), _) => p.clone(),
        (None, Some(p)) => PathBuf::from(p),
        (None, None) => beside_me("libcupti_inject.so").context("cannot locate gputrace's own folder")?,
    };
    if gpu && !inject.exists() {
        bail!("the injection library {} is missing (build it: cargo build --release -p cupti-inject, or pass --inject)", inject.display());
    }
    let inject = inject.canonicalize().unwrap_or(inject);
    if cli.duration.is_some() && cli.pid.is_none() {
        bail!("-d goes with -p PID (a COMMAND is traced until it exits)");
    }
    if let Some(pid) = cli.pid {
        return run_attached(cli, pid, &inject).map(|_| 0);
    }
    // A fresh private folder at a random name (a predictable one, made
    // with create_dir_all, took whatever stood there: a link planted by
    // another user); removed when this returns.
    let dir = tempfile::Builder::new()
        .prefix("gputrace-")
        .tempdir()
        .with_context(|| format!("cannot create a folder in {}", std::env::temp_dir().display()))?;
    let result = trace(cli, gpu, cpu, &inject, dir.path());
    if std::env::var_os("WALLCLOCK_GPUTRACE_KEEP").is_some() {
        eprintln!("gputrace: raw files kept in {}", dir.keep().display());
    }
    result
}

fn trace(cli: &Cli, gpu: bool, cpu: bool, inject: &Path, dir: &Path) -> Result<i32> {
    // Open the output first: a bad -o fails before the program runs.
    let out = wallclock_stream::cli::open_output(cli.output.as_deref())?;
    let to_stdout = cli.output.as_deref().is_none_or(|p| p == Path::new("-"));
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    if gpu {
        env.push(("CUDA_INJECTION64_PATH".into(), inject.into()));
        env.push(("WALLCLOCK_GPUTRACE_DIR".into(), dir.into()));
        if let Some(c) = &cli.cupti {
            env.push(("WALLCLOCK_CUPTI_PATH".into(), c.into()));
        }
    }
    // The program is held before exec (as the capture tools hold theirs):
    // with on-CPU sampling, until oncputime is attached, so that a short
    // program is not missed.
    let start_ns = monotonic_ns();
    let mut child = spawn_held_env(&cli.command, to_stdout, &env)?;
    let pid = child.pid();
    // The terminal's Ctrl-C reaches the program; we outlive it to write the stream.
    // SAFETY: setting a signal disposition.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
    }
    let mut oncpu = if cpu { start_oncputime(cli, pid, dir) } else { None };
    if let Some(o) = oncpu.as_mut() {
        // Ready when attached (its --ready-file), or gone; at most 10 s.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && !o.ready.exists() && matches!(o.child.try_wait(), Ok(None))
        {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    if let Err(e) = child.release() {
        if let Some(o) = oncpu {
            finish_oncputime(o, dir);
        }
        return Err(e);
    }
    let code = child.wait_exit_code();
    let end_ns = monotonic_ns();
    let cpu_records = oncpu.map(|o| finish_oncputime(o, dir)).unwrap_or_default();

    let mut files = Vec::new();
    for e in std::fs::read_dir(dir)?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(p) = name.strip_prefix("gpu-").and_then(|s| s.strip_suffix(".txt")).and_then(|s| s.parse().ok()) {
            files.push((p, std::fs::read_to_string(e.path())?));
        }
    }
    files.sort();
    let c = if gpu { collect::collect(&files) } else { collect::Collected::default() };
    report_notes(&c);

    let mut header = Header::new("gputrace", env!("CARGO_PKG_VERSION"));
    header.pids = vec![pid];
    header.command = Some(cli.command.clone());
    header.start_ns = Some(start_ns);
    header.end_ns = Some(end_ns);
    let mut counts = c.counts.clone();
    for (k, v) in &cpu_records.1 {
        *counts.entry(k.clone()).or_default() += v;
    }
    if let Some(f) = cpu_records.2 {
        header.freq_hz = Some(f);
    }
    for k in ["gpu_records_dropped", "gpu_unmatched", "gpu_cupti_unavailable"] {
        if let Some(&v) = counts.get(k).filter(|&&v| v > 0) {
            header.lost.insert(k.to_string(), v);
        }
    }
    let mut w = Writer::from_env(out)?;
    w.write(&Record::Header(header))?;
    for r in cpu_records.0.iter().chain(&c.records) {
        w.write(r)?;
    }
    if cli.timeline {
        for r in &c.timeline {
            w.write(r)?;
        }
    }
    w.write(&Record::Stats(Stats { end_ns: Some(end_ns), counts }))?;
    w.flush()?;
    Ok(code)
}

/// `-p PID`: the window's records as a stream. A process that exits
/// during the window still has its records written, then the error.
fn run_attached(cli: &Cli, pid: u32, inject: &Path) -> Result<()> {
    if cli.duration.is_some_and(|d| !(d > 0.0 && d.is_finite())) {
        bail!("-d must be a positive number of seconds");
    }
    let out = wallclock_stream::cli::open_output(cli.output.as_deref())?;
    let cap = attach::capture(cli, pid, inject)?;
    let c = collect::collect(&[(pid, cap.text)]);
    report_notes(&c);
    let mut header = Header::new("gputrace", env!("CARGO_PKG_VERSION"));
    header.pids = vec![pid];
    header.start_ns = c.start_ns;
    header.end_ns = c.end_ns;
    for k in ["gpu_records_dropped", "gpu_unmatched", "gpu_cupti_unavailable"] {
        if let Some(&v) = c.counts.get(k).filter(|&&v| v > 0) {
            header.lost.insert(k.to_string(), v);
        }
    }
    let mut w = Writer::from_env(out)?;
    w.write(&Record::Header(header))?;
    for r in &c.records {
        w.write(r)?;
    }
    if cli.timeline {
        for r in &c.timeline {
            w.write(r)?;
        }
    }
    w.write(&Record::Stats(Stats { end_ns: c.end_ns, counts: c.counts.clone() }))?;
    w.flush()?;
    if cap.exited {
        bail!("process {pid} exited during the capture (its records up to the exit are written)");
    }
    Ok(())
}

/// The injection library's notes, and once, in one line, why no GPU
/// activity was recorded when CUPTI was unusable.
fn report_notes(c: &collect::Collected) {
    for n in &c.notes {
        eprintln!("gputrace: note: {n}");
    }
    if let Some(w) = c.warnings.first() {
        eprintln!("gputrace: warning: no GPU activity recorded: {w}; the program ran unprofiled");
    }
}

struct OnCpu {
    child: std::process::Child,
    started: Instant,
    /// Created by oncputime once attached.
    ready: PathBuf,
}

fn start_oncputime(cli: &Cli, pid: u32, dir: &Path) -> Option<OnCpu> {
    let Some(bin) = beside_me("oncputime").filter(|p| p.exists()) else {
        eprintln!("gputrace: oncputime is not beside gputrace: no on-CPU samples");
        return None;
    };
    let out = std::fs::File::create(dir.join("oncpu.jsonl")).ok()?;
    let ready = dir.join("oncpu.ready");
    let child = Command::new(bin)
        // --exact: no offcputime runs beside it to measure on-CPU time.
        .args(["--exact", "-p", &pid.to_string(), "-F", &cli.freq.to_string()])
        .arg("--ready-file")
        .arg(&ready)
        .stdout(out)
        .stdin(Stdio::null())
        .spawn();
    match child {
        Ok(child) => Some(OnCpu { child, started: Instant::now(), ready }),
        Err(e) => {
            eprintln!("gputrace: cannot run oncputime: {e}: no on-CPU samples");
            None
        }
    }
}

/// Stops oncputime (SIGINT, as a user would) and reads its stream:
/// records other than header/stats, its stats counts, its frequency.
fn finish_oncputime(mut o: OnCpu, dir: &Path) -> (Vec<Record>, Vec<(String, u64)>, Option<u64>) {
    let early = o.child.try_wait().ok().flatten();
    if early.is_none() {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(o.child.id() as i32, libc::SIGINT) };
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        match o.child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = o.child.kill();
                break o.child.wait().ok();
            }
        }
    };
    let path = dir.join("oncpu.jsonl");
    let text = std::fs::read(&path).unwrap_or_default();
    if status.and_then(|s| s.code()) == Some(2) && text.is_empty() {
        eprintln!("gputrace: oncputime is not available yet (it exited 2 after {:?}): GPU records only", o.started.elapsed());
        return Default::default();
    }
    let mut recs = Vec::new();
    let mut counts = Vec::new();
    let mut freq = None;
    for r in Reader::new(&text[..], "oncputime", ReaderOptions::default()) {
        match r {
            Ok(Record::Header(h)) => freq = h.freq_hz,
            Ok(Record::Stats(s)) => counts.extend(s.counts),
            Ok(r) => recs.push(r),
            Err(e) => {
                eprintln!("gputrace: oncputime output: {e}");
                break;
            }
        }
    }
    if recs.is_empty() {
        let _ = std::io::stderr().flush();
        let code = status.and_then(|s| s.code()).map_or("a signal".to_string(), |c| format!("code {c}"));
        eprintln!("gputrace: oncputime wrote no samples (it exited with {code}; it needs root)");
    }
    (recs, counts, freq)
}
