//! wcreport: where each thread's wall-clock time went.
//!
//! ```text
//! usage: wcreport [FILE...] [--json] [--top N] [--split-dir DIR --prefix PREFIX]
//!
//! in:  the stream (best after stackmerge), or plain folded lines
//! out: PROCESS 42 (app): wall 2.00 s, 2 thread(s) alive 4.00 s thread-time; ...
//!        TID  NAME    ROLE    CLASS         ALIVE   ON-CPU  RUNNABLE ... COVERAGE
//!        42   app     main    cpu-bound     2.00 s  1.80 s  20.0 ms  ...   100.0%
//! ```
//!
//! Per thread: alive time in the window, on-CPU, off-CPU by state (R, S,
//! D, other), GPU time apart (never added to the thread's wall clock),
//! coverage = (on + off) / alive, role and behaviour class, and where the
//! time went by the thread's own functions: innermost user frame first,
//! then the library call and the kernel reason
//! (`write_journal → fdatasync → [D] folio_wait_writeback`, see
//! [`functions`]). One section per process, heaviest first. The modules
//! whose time has no name, with what to install ([`names`]). For a Python
//! (CPython) thread, its off-CPU time waiting for the GIL (`gil_ns`: the
//! stacks under the `[GIL]` frame stacksym adds above `take_gil`).
//! When the input has GPU records, a GPU section (`gpu` in the JSON, see
//! [`gpu`]): busy time per device, top kernels by time and by count with
//! their mean launch-to-start delay, copies, memsets, the CPU's waits in
//! synchronizations, and the GPU losses the capture counted. What the
//! off-CPU time waited on (`WAITED ON`, `waited_on` in the JSON, see
//! [`objects`]): each file, socket, lock or child by time, with its
//! heaviest threads and call sites.

pub mod frames;
pub mod functions;
pub mod gpu;
pub mod gpu_idle;
pub mod model;
pub mod modules;
pub mod names;
pub mod objects;
mod process;
pub mod report;
pub mod runtimes;
pub mod spans;
mod spans_text;
pub mod text;
mod text_commands;
mod text_fmt;
mod text_gpu;
pub mod text_where;
pub mod wakers;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Parser;
use wallclock_stream::cli::{open_output, read_all_lenient};
use wallclock_stream::ReaderOptions;

pub use report::{build, Report};

const EXAMPLES: &str = "EXAMPLES:
    stackmerge off.json --on on.json | wcreport
        the time accounting of every thread, for humans
    wcreport merged.json --json | jq '.threads[] | {tid, class, coverage_pct}'
        the same for scripts (ns integers, stable field names)
    wcreport merged.json --top 10
        ten heaviest stacks of each kind per thread
    wcreport merged.json --split-dir out/threads --prefix out/run
        writes out/run_thread_analysis.txt, out/threads/thread_TID_ROLE_analysis.txt
        and, for a one-thread target, out/run_single_thread_analysis.txt";

/// Time accounting per process and per thread.
///
/// Per thread: alive time in the window (its thread record's life, else the
/// header's window), on-CPU, off-CPU by state (R runnable, S sleeping,
/// D uninterruptible, other), GPU time beside it (never added to the
/// thread's wall clock), coverage = (on + off) / alive, its role (main, or
/// from the thread name; the same string as in flame --split-dir file
/// names) and behaviour class (cpu-bound, io-bound, lock-waiting,
/// gil-waiting (CPython's GIL),
/// sleeping, runnable-starved, idle), and where its time went by its own
/// functions: the innermost user frame (not kernel, not a system library),
/// then the library call it made and the kernel frame that says why it
/// waited, with the state: `write_journal → fdatasync → [D]
/// folio_wait_writeback`, `compute [on-CPU]`. Whole stacks are in --json
/// (`top`) and in the folded files. Per process (one section each,
/// heaviest first): the threads' total in thread-seconds beside the wall
/// time. Per module: the share of its time without a name, with the debug
/// package or file to install. [short blocks], [lost stack] and every
/// count the capture reported lost are shown.
#[derive(Debug, Parser)]
#[command(name = "wcreport", version, about, after_help = EXAMPLES)]
pub struct Cli {
    /// Input streams or folded files; stdin when none.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// JSON for scripts: ns integers, stable field names.
    #[arg(long)]
    pub json: bool,
    /// Functions shown per thread (and ways per function); heaviest stacks
    /// per kind and thread in --json.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub top: usize,
    /// Write the report files of the earlier tool (nothing on stdout):
    /// PREFIX_thread_analysis.txt, DIR/thread_TID_ROLE_analysis.txt, and
    /// PREFIX_single_thread_analysis.txt for a one-thread target.
    #[arg(long, value_name = "DIR")]
    pub split_dir: Option<PathBuf>,
    /// Path prefix of the overview files of --split-dir (default DIR/wallclock).
    #[arg(long, value_name = "PREFIX", requires = "split_dir")]
    pub prefix: Option<PathBuf>,
    /// Timelines (`offcputime --timeline`, `gputrace --timeline` streams)
    /// whose slices give the GPU idle view: each device's idle time, and
    /// what its launching threads did meanwhile. Only their slice,
    /// slice_stack and maps records are read (the sums come from FILE).
    /// (`--timeline`, a switch in the capture tools, is kept here as a
    /// hidden alias.)
    #[arg(long = "timeline-from", alias = "timeline", value_name = "FILE")]
    pub timeline: Vec<PathBuf>,
    /// Streams holding the program's spans (`offcputime --probe` with a
    /// span, best with --timeline) and the samples that divide their
    /// on-CPU time (`oncputime --sample-events`): the report gets a SPANS
    /// section per span name (count, latency p50/p90/p99/max, and where
    /// the slow ones' time went by state and by own function). Without
    /// FILE, only that section is written.
    #[arg(long, value_name = "FILE")]
    pub spans: Vec<PathBuf>,
    /// With --spans: the slow spans are those longer than this (`5ms`,
    /// `250us`, `1.5s`); every span counts without it.
    #[arg(long = "slower-than", value_name = "DURATION", requires = "spans", value_parser = parse_duration)]
    pub slower_than: Option<u64>,
    /// With --spans: write the slow spans' time as folded lines, each stack
    /// under a root naming its span (µs; leaf _[c] on-CPU, _[o] off-CPU).
    #[arg(long = "spans-folded", value_name = "FILE", requires = "spans")]
    pub spans_folded: Option<PathBuf>,
    /// Output file (stdout by default).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// `5ms`, `250us`, `1.5s`, `800ns` (a bare number is seconds) as ns.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().map_err(|_| format!("'{s}' is not a duration (5ms, 250us, 1.5s)"))?;
    let mult = match unit.trim() {
        "" | "s" => 1e9,
        "ms" => 1e6,
        "us" | "µs" => 1e3,
        "ns" => 1.0,
        u => return Err(format!("'{s}': unknown unit '{u}' (s, ms, us, ns)")),
    };
    Ok((v * mult).round() as u64)
}

/// The SPANS section of `--spans` (empty without), and its folded file.
fn spans_section(cli: &Cli) -> Result<String> {
    if cli.spans.is_empty() {
        return Ok(String::new());
    }
    let mut inp = spans::Input::default();
    for f in &cli.spans {
        let (recs, err) = read_all_lenient(std::slice::from_ref(f), ReaderOptions::default());
        if let Some(e) = err {
            return Err(e.context(format!("reading --spans {}", f.display())));
        }
        inp.add(recs);
    }
    let (reports, stacks) = spans::build(&inp, cli.slower_than);
    if let Some(p) = &cli.spans_folded {
        std::fs::write(p, spans::folded(&stacks)).with_context(|| format!("writing {}", p.display()))?;
    }
    if inp.is_empty() {
        // Said, not an error: a window in which no span ended is a finding.
        return Ok("SPANS: none ended in the window (no span record in the input)\n".into());
    }
    Ok(spans_text::section(&reports, cli.top))
}

/// The clap command (for the man page generator).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Read, build, write. A bad line stops the reading: the report of what
/// came before it is still written, then the error is returned.
pub fn run(cli: &Cli) -> Result<()> {
    let spans = spans_section(cli)?;
    if !cli.spans.is_empty() && cli.files.is_empty() {
        let mut out = open_output(cli.output.as_deref())?;
        out.write_all(spans.as_bytes())?;
        out.flush()?;
        return Ok(());
    }
    let (mut records, err) = read_all_lenient(&cli.files, ReaderOptions::default());
    if !cli.timeline.is_empty() {
        let (tl, tl_err) = read_all_lenient(&cli.timeline, ReaderOptions::default());
        if let Some(e) = tl_err {
            return Err(e.context("reading --timeline-from"));
        }
        use wallclock_stream::Record;
        records.extend(tl.into_iter().filter(|r| matches!(r, Record::Slice(_) | Record::SliceStack(_) | Record::Maps(_))));
    }
    let rep = build(&records, cli.top);
    let mut out = open_output(cli.output.as_deref())?;
    if let Some(dir) = &cli.split_dir {
        let prefix = cli.prefix.clone().unwrap_or_else(|| dir.join("wallclock"));
        write_split(&rep, dir, &prefix, cli.top)?;
    } else if cli.json {
        write_json(&rep, &mut out)?;
    } else {
        out.write_all(text::full(&rep, cli.top).as_bytes())?;
        out.write_all(spans.as_bytes())?;
    }
    out.flush()?;
    match err {
        Some(e) => Err(e.context("stopped at a bad line; the report covers the records before it")),
        None => Ok(()),
    }
}

pub fn write_json(rep: &Report, out: &mut dyn Write) -> Result<()> {
    // One line: `jq` pretty-prints it, `grep -o '"tid":[0-9]*'` finds the threads.
    serde_json::to_writer(&mut *out, rep)?;
    out.write_all(b"\n")?;
    Ok(())
}

/// The files of the earlier tool: `<prefix>_thread_analysis.txt` (the
/// overview), `<dir>/thread_<TID>_<role>_analysis.txt` per thread, and
/// `<prefix>_single_thread_analysis.txt` when there is one thread. Returns
/// the paths written.
pub fn write_split(rep: &Report, dir: &Path, prefix: &Path, max_parts: usize) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    if let Some(parent) = prefix.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let mut written = Vec::new();
    let mut put = |path: PathBuf, text: String| -> Result<()> {
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
        Ok(())
    };
    let with_suffix = |s: &str| {
        let mut p = prefix.as_os_str().to_owned();
        p.push(s);
        PathBuf::from(p)
    };
    put(with_suffix("_thread_analysis.txt"), text::full(rep, max_parts))?;
    for t in &rep.threads {
        put(dir.join(format!("thread_{}_{}_analysis.txt", t.tid, t.role)), text::thread_file(rep, t, max_parts))?;
    }
    if rep.threads.len() == 1 {
        put(with_suffix("_single_thread_analysis.txt"), text::full(rep, max_parts))?;
    }
    Ok(written)
}
