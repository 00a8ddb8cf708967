//! wcexport: the stream in the formats other profilers' tools read.
//!
//! ```text
//! usage: wcexport [FILE...] --pprof [-o FILE]
//!        wcexport [FILE...] --push URL [--app NAME] [--label KEY=VALUE]...
//!        wcexport [FILE...] --trace [-o FILE]
//!
//! in:  the stream (best after stackmerge: symbolized, on + off + GPU), or folded lines
//! out: a gzipped pprof profile (profile.proto) with sample types wall, cpu,
//!      off_cpu_{runnable,sleeping,uninterruptible,other} and gpu, in ns,
//!      and labels thread, thread_id, process, pid, state (object) on each sample
//! ```
//!
//! What becomes what is in [`convert`]; the push in [`push`]; the
//! timeline of a `--timeline` capture (`--trace`, Chrome trace-event JSON
//! for Perfetto UI and chrome://tracing) in [`trace`].

pub mod convert;
mod profile;
pub mod proto;
pub mod push;
pub mod trace;
mod trace_gpu;
mod trace_time;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Parser;
use wallclock_stream::cli::{open_output, read_all};
use wallclock_stream::ReaderOptions;

pub use convert::{Converter, Input, SAMPLE_TYPES};
pub use profile::Profile;

const EXAMPLES: &str = "EXAMPLES:
    wcexport --pprof run.stream -o run.pb.gz
        the profile of scripts/wallclock --prefix run, for pprof, Pyroscope or Parca
    go tool pprof -http=: run.pb.gz
        browse it: wall time by default; -sample_index=off_cpu_sleeping,
        -tagfocus=thread=demo-io, -tags for the labels
    stackmerge off.sym --on on.sym | wcexport --pprof > out.pb.gz
        at the end of the pipeline (after stacksym, for names)
    wcexport run.stream --push http://localhost:4040 --app shop --label env=staging
        send it to Pyroscope: series shop.wall, shop.cpu, shop.off_cpu_sleeping...
    offcputime --timeline -p 1234 5 | wcexport --trace -o run.json
        the timeline: one track per thread, slices by state with their stacks;
        open run.json in ui.perfetto.dev or chrome://tracing";

/// Export the stream as a pprof profile, to a file or a Pyroscope server.
///
/// The profile (profile.proto, gzipped) has one sample per stack and
/// labels, with seven values in nanoseconds: wall (on + off-CPU: the
/// stack's time; the default sample type and period type, period 1),
/// cpu (on-CPU), off_cpu_runnable, off_cpu_sleeping,
/// off_cpu_uninterruptible, off_cpu_other (off-CPU by state), and gpu
/// (GPU time under the launching stack; never part of wall). Labels on
/// each sample: thread (the thread's comm), thread_id, process (the name
/// of the thread whose tid is the pid: the name after exec), pid,
/// state (running, runnable, sleeping, uninterruptible, other, gpu), and
/// object on an off-CPU stack that waited on one (file /path, tcp
/// 127.0.0.1:5432, lock g_lock, lock in worker_loop...:
/// wallclock-stream(5)), and object_raw, the lock's address (lock
/// 0x7f..), for a lock named by its call site.
/// Symbolized frames become Functions (name, file) and Locations: a frame
/// with the frames inlined into it is one Location of several Lines,
/// innermost first, with the line numbers the stream has; its address is
/// the raw one when the stream's frames line up with its addresses
/// (stacksym's output has them; stackmerge's merges by frames and has
/// none).
/// Synthetic frames ([steal], [sleep], [io], [lost stack]...) are kept as
/// function names. Maps records become Mappings (file, build id, start,
/// limit, offset), the target's executable first; kernel frames share a
/// [kernel.kallsyms] mapping. Unsymbolized input gives Locations with
/// addresses and mappings only, for pprof to symbolize by build id.
/// time_nanos is the window's start, converted from CLOCK_MONOTONIC to
/// UTC with this machine's current offset; duration_nanos its length.
/// Comments name the producing tool and the losses the capture counted.
#[derive(Debug, Parser)]
#[command(name = "wcexport", version, about, after_help = EXAMPLES)]
#[command(group = clap::ArgGroup::new("format").required(true).multiple(true).args(["pprof", "push", "trace"]))]
pub struct Cli {
    /// Input streams or folded files (values in us); stdin when none.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Write the pprof profile (gzipped profile.proto) to -o or stdout.
    #[arg(long)]
    pub pprof: bool,
    /// Write the timeline of a `--timeline` capture (its slice records) as
    /// Chrome trace-event JSON, for Perfetto UI and chrome://tracing: one
    /// track per thread grouped by process, slices named and coloured by
    /// state (running, runnable, sleeping, uninterruptible, other) with
    /// their stacks in args (and, captured with --wakers, each off-CPU
    /// slice's waker and its stack, with a flow arrow from the waker's
    /// track), GPU activities on tracks of their own.
    #[arg(long, conflicts_with_all = ["pprof", "push"])]
    pub trace: bool,
    /// Output file (stdout by default; never a terminal).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Send the pprof profile to a Pyroscope-compatible server:
    /// http://HOST:PORT (POST /ingest is appended) or its ingest URL.
    /// Written to -o too when -o or --pprof is given.
    #[arg(long, value_name = "URL")]
    pub push: Option<String>,
    /// Application name for --push (default: the target process's name).
    #[arg(long, value_name = "NAME", requires = "push", value_parser = parse_app)]
    pub app: Option<String>,
    /// A series label for --push (repeatable): env=prod, host=web1.
    #[arg(long = "label", value_name = "KEY=VALUE", requires = "push", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
}

fn parse_app(s: &str) -> Result<String, String> {
    if s.is_empty() || s.contains(['{', '}', ',', '=']) {
        return Err(format!("{s:?}: an application name is not empty and has no {{ }} , ="));
    }
    Ok(s.to_string())
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("{s:?}: expected KEY=VALUE"))?;
    let key_ok = !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !key_ok || v.is_empty() || v.contains([',', '{', '}', '=']) {
        return Err(format!("{s:?}: a label is KEY=VALUE, KEY of letters, digits and _, VALUE without , {{ }} ="));
    }
    Ok((k.to_string(), v.to_string()))
}

/// The clap command (for the man page generator).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Nanoseconds to add to CLOCK_MONOTONIC to get UTC, now: the two read
/// together ([`wallclock_stream::clocks::clock_pair`]). Two plain reads
/// with a preemption between them would shift the profile's start by the
/// wait, and `--every`'s windows, each exported with its own offset,
/// would no longer meet end to end.
pub fn monotonic_to_utc_ns() -> i64 {
    let (mono, real) = wallclock_stream::clocks::clock_pair();
    real as i64 - mono as i64
}

/// The profile of the input; `offset` converts its clock to UTC.
pub fn build(inp: &Input, offset: i64) -> Profile {
    let mut p = Converter::new(inp).run();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    if let Some((start, end)) = inp.window() {
        p.duration_nanos = end.saturating_sub(start) as i64;
    }
    // A window that would end in the future was not taken on this boot:
    // it is placed to end now.
    p.time_nanos = match inp.window() {
        Some((start, _)) if start as i64 + offset + p.duration_nanos <= now => start as i64 + offset,
        _ => now - p.duration_nanos,
    };
    if let Some(h) = &inp.header {
        p.comment(&format!("wallclock stream {} of {} {}, pids {:?}", h.version, h.tool, h.tool_version, h.pids));
        match (&h.event, h.event_period) {
            (Some(e), period) => p.comment(&format!(
                "values: counts of {e} (oncputime -e: samples times {} events each), not time",
                period.unwrap_or(1)
            )),
            _ => p.comment("values: ns measured (off-CPU, GPU) or samples scaled to the exact on-CPU time (stackmerge)"),
        }
    }
    let mut lost = inp.header.as_ref().map(|h| h.lost.clone()).unwrap_or_default();
    if let Some(s) = &inp.stats {
        for name in ["lost_stacks", "lost_stack_ns", "ringbuf_drops", "map_full", "missed_switches", "gpu_records_dropped"] {
            if let Some(&n) = s.counts.get(name) {
                lost.insert(name.to_string(), n);
            }
        }
    }
    let lost: Vec<String> = lost.iter().filter(|(_, &n)| n > 0).map(|(k, n)| format!("{k}={n}")).collect();
    if !lost.is_empty() {
        p.comment(&format!("lost: {}", lost.join(" ")));
    }
    p
}

/// `name` cleaned for a Pyroscope application name.
fn app_name(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect()
}

pub fn run(cli: &Cli) -> Result<()> {
    let inp = Input::new(read_all(&cli.files, ReaderOptions::default())?);
    if cli.trace {
        let mut out = open_output(cli.output.as_deref())?;
        return trace::write(&inp, &mut out);
    }
    if inp.stacks.is_empty() {
        bail!("the input holds no stacks: nothing to export");
    }
    let profile = build(&inp, monotonic_to_utc_ns());
    let gz = profile.to_gzip()?;
    if cli.pprof || cli.output.is_some() {
        let to_stdout = cli.output.as_deref().is_none_or(|p| p == std::path::Path::new("-"));
        if to_stdout && std::io::stdout().is_terminal() {
            bail!("the profile is binary: give -o FILE or redirect stdout");
        }
        let mut out = open_output(cli.output.as_deref())?;
        out.write_all(&gz)?;
        out.flush()?;
    }
    if let Some(url) = &cli.push {
        let app = cli.app.clone().unwrap_or_else(|| app_name(&inp.main_process().map(|(_, n)| n).unwrap_or_default()));
        let app = if app.is_empty() { "wallclock".to_string() } else { app };
        let from = profile.time_nanos.max(0) as u64 / 1_000_000_000;
        let until = (profile.time_nanos.max(0) as u64 + profile.duration_nanos as u64).div_ceil(1_000_000_000);
        push::push(url, &push::query(&app, &cli.labels, from, until), &gz)?;
    }
    Ok(())
}
