//! stackmerge: one wall-clock view of on-CPU, off-CPU and GPU stacks.
//!
//! ```text
//! usage: stackmerge [OFF...] [--on FILE]... [--gpu-from FILE]... [--folded] [-o FILE]
//!
//! in  (off, bcc offcputime -f, us):  app;main;read 1500
//! in  (--on, bcc profile -f, samples at 49 Hz):  app;main;compute 49
//! out (--folded, us):  app;main;read_[o] 1500
//!                      app;main;compute_[c] 1000000
//! ```
//!
//! Everything becomes integer ns: off-CPU and GPU time as measured; on-CPU
//! samples scaled to the thread's exact on-CPU time when a thread record
//! carries `on_ns` (width = on_ns x samples(stack) / samples(thread)), else
//! samples x 1e9 / freq. The off-CPU state becomes a leaf frame
//! (`[runnable]`, `[sleep]`, `[io]`, `[other]`). GPU time never enters a
//! thread's wall-clock accounting.

mod finish;
mod intern;
mod key;
mod locks;
mod merge;
mod named;
mod order;
mod output;
mod stream_out;
mod symbolize;
mod unsampled;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;
use wallclock_stream::units::Unit;
use wallclock_stream::Kind;

pub use order::Merged;
pub use merge::{InputRole, Merger};
pub use unsampled::NOT_SAMPLED_FRAME;

const EXAMPLES: &str = "EXAMPLES:
    sudo offcputime -p 1234 10 | stacksym | stackmerge --on on.json | flame > wall.svg
        merge an off-CPU stream (stdin) with an on-CPU stream into one stream
        (on.json may come raw from oncputime: its frames are named here)
    stackmerge off.folded --on profile.folded --folded > wall.folded
        bcc offcputime -f (us) and profile -f (samples at 49 Hz) as folded us
    stackmerge merged.json --per-thread --folded --unit ms
        one root per thread (comm-TID), values in ms
    stackmerge all.json --pid 1234 --kind off --folded | head
        only the off-CPU stacks of process 1234
    stackmerge off.json --gpu-from gpu.json --gpu-roots --folded
        GPU kernels rooted at [gpu DEV stream S] instead of the process
    sudo offcputime --wakers -p 1234 10 | stacksym | stackmerge --wakers --folded
        each block with who woke it: main;read;[sleep]_[o];--;write_[w];...;writer (42)_[w]";

/// Merge on-CPU, off-CPU and GPU stacks into one wall-clock stream.
///
/// Everything becomes integer ns on one clock. On-CPU samples divide each
/// thread's exact on-CPU time when a thread record carries `on_ns`
/// (width = on_ns x samples(stack) / samples(thread)), else count
/// samples x 1e9 / freq (the input's header, or --freq for folded input);
/// perf script input weighs stacks by their summed periods (ns). Off-CPU
/// folded values are microseconds (bcc offcputime -f). The off-CPU state
/// becomes the leaf frame ([runnable], [sleep], [io], [other]); a GPU
/// activity's name sits under the stack that launched it. GPU time is never
/// added to a thread's wall-clock accounting. Folded output: values in
/// --unit (default us), summed per line in ns and rounded once; leaf
/// markers _[c] on-CPU, _[o] off-CPU, _[g] GPU; each stack under its
/// process, NAME (PID), NAME being its main thread's name (after exec).
/// Stacks that come with frames are merged by their frames, their raw
/// addresses dropped (stacksym's output keeps them, to be named again).
/// Stacks that come without frames (a raw oncputime stream) are named here
/// as stacksym would name them: from the inputs' maps records (so exited
/// processes are named), else the live process; what cannot be named is
/// told once per module on stderr and counted in the trailer
/// (unnamed_ns:MODULE...).
#[derive(Debug, Parser)]
#[command(name = "stackmerge", version, about, after_help = EXAMPLES)]
pub struct Cli {
    /// Off-CPU inputs (stream or folded lines in us); stdin when none.
    #[arg(value_name = "OFF")]
    pub off: Vec<PathBuf>,
    /// On-CPU input (stream, folded sample counts as bcc profile -f writes, or
    /// perf script output, weighted by period in ns); repeatable; `-` is stdin.
    #[arg(long = "on", value_name = "FILE")]
    pub on: Vec<PathBuf>,
    /// GPU input (stream, or folded lines in us); repeatable. (`--gpu
    /// FILE`, its old spelling, warns: `--gpu` is a switch in `wallclock`.)
    #[arg(long = "gpu-from", alias = "gpu", value_name = "FILE")]
    pub gpu: Vec<PathBuf>,
    /// Output file (stdout by default).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write folded lines instead of the stream.
    #[arg(short = 'f', long)]
    pub folded: bool,
    /// Unit of folded values.
    #[arg(long, default_value = "us", value_name = "ns|us|ms")]
    pub unit: Unit,
    /// Sampling frequency of on-CPU input without a header (Hz).
    #[arg(short = 'F', long = "frequency", alias = "freq", default_value_t = 49, value_name = "HZ")]
    pub freq: u64,
    /// Each folded stack rooted at its thread (COMM-TID) instead of its
    /// process (NAME (PID)); `wallclock` splits these lines into one file
    /// per thread, as `flame --split-dir` draws one graph per thread.
    #[arg(long)]
    pub per_thread: bool,
    /// Folded roots: `pid`, each process its own root NAME (PID);
    /// `command`, processes grouped by command name (NAME: every cc1 of a
    /// build in one root); `auto`, by pid up to 8 processes, by command
    /// above (a build, a system-wide capture).
    #[arg(long, default_value = "auto", value_name = "auto|pid|command")]
    pub roots: wallclock_stream::folded::Roots,
    /// Root GPU stacks at [gpu DEV stream S].
    #[arg(long)]
    pub gpu_roots: bool,
    /// Keep only these processes (comma-separated or repeated).
    #[arg(short = 'p', long = "pid", value_delimiter = ',', value_name = "PID")]
    pub pids: Vec<u32>,
    /// Keep only these threads (comma-separated or repeated).
    #[arg(short = 't', long = "tid", value_delimiter = ',', value_name = "TID")]
    pub tids: Vec<u32>,
    /// Keep who woke each block (`offcputime --wakers`): folded lines read
    /// `blocked frames;--;waker frames`, as bcc's offwaketime, the waker's
    /// frames marked `_[w]` from its leaf to its root and its name
    /// (`comm (TID)`, or `[timer]`, `[irq]`, `[softirq]`) last; a chain
    /// (`--wake-depth`) goes on with `--` and the waker's own block, root
    /// to leaf. Without it, blocks are summed over their wakers.
    #[arg(long)]
    pub wakers: bool,
    /// Sum off-CPU stacks over what they waited on: no `[file PATH]`,
    /// `[tcp ADDR:PORT]`, `[lock NAME]`, `[child COMM PID]` frame after
    /// the state leaf (the stream's `object`, wallclock-stream(5)).
    #[arg(long = "no-objects")]
    pub no_objects: bool,
    /// Keep only these kinds: on, off, gpu, other (comma-separated or repeated).
    #[arg(long = "kind", value_delimiter = ',', value_name = "KIND", value_parser = parse_kind)]
    pub kinds: Vec<Kind>,
}

fn parse_kind(s: &str) -> Result<Kind, String> {
    match s {
        "on" => Ok(Kind::On),
        "off" => Ok(Kind::Off),
        "gpu" => Ok(Kind::Gpu),
        "other" => Ok(Kind::Other),
        _ => Err(format!("unknown kind {s:?}: use on, off, gpu or other")),
    }
}

/// The clap command (for the man page generator).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Options of the merge itself (what `Cli` says beside the paths).
#[derive(Debug, Clone)]
pub struct Options {
    pub folded: bool,
    pub unit: Unit,
    pub freq: u64,
    pub per_thread: bool,
    pub roots: wallclock_stream::folded::Roots,
    pub gpu_roots: bool,
    pub pids: Vec<u32>,
    pub tids: Vec<u32>,
    pub kinds: Vec<Kind>,
    pub wakers: bool,
    /// Off-CPU stacks keep what they waited on (`object`) as a frame after
    /// the state leaf; `--no-objects` sums them over it.
    pub objects: bool,
}

impl From<&Cli> for Options {
    fn from(c: &Cli) -> Self {
        Options {
            folded: c.folded,
            unit: c.unit,
            freq: c.freq,
            per_thread: c.per_thread,
            roots: c.roots,
            gpu_roots: c.gpu_roots,
            pids: c.pids.clone(),
            tids: c.tids.clone(),
            kinds: c.kinds.clone(),
            wakers: c.wakers,
            objects: !c.no_objects,
        }
    }
}

/// Read every input, merge, write. A bad line stops the reading; what was
/// read before it is still merged and written, then the error is returned.
pub fn run(cli: &Cli) -> Result<()> {
    let opts = Options::from(cli);
    let mut paths: Vec<(InputRole, PathBuf)> = Vec::new();
    let stdin_is_tty = std::io::stdin().is_terminal();
    let dash = std::path::Path::new("-");
    let stdin_taken = cli.on.iter().chain(&cli.gpu).any(|p| p == dash);
    if cli.off.is_empty() && !stdin_taken {
        // With only --on/--gpu given and nothing piped in, do not wait on a terminal.
        if !(stdin_is_tty && (!cli.on.is_empty() || !cli.gpu.is_empty())) {
            paths.push((InputRole::Off, PathBuf::from("-")));
        }
    }
    paths.extend(cli.off.iter().map(|p| (InputRole::Off, p.clone())));
    paths.extend(cli.on.iter().map(|p| (InputRole::On, p.clone())));
    paths.extend(cli.gpu.iter().map(|p| (InputRole::Gpu, p.clone())));

    let mut merger = Merger::new(&opts);
    let res = merger.read_paths(&paths);
    let mut merged = merger.finish();
    let mut out = wallclock_stream::cli::open_stream_output(cli.output.as_deref())?;
    write(&mut merged, &opts, &mut out)?;
    out.flush()?;
    // The process ends here, and the next tool of a pipeline starts drawing
    // at its end: freeing the stack table one allocation at a time first
    // would only delay it.
    std::mem::forget(merged);
    res.map_err(|e| match wallclock_stream::cli::parse_error(&e) {
        Some(_) => e.context("stopped at a bad line; the records before it were merged and written"),
        None => e,
    })
}

/// Write the merged result as the stream or as folded lines.
/// The stream takes the stacks, threads and maps out of `m`.
pub fn write(m: &mut Merged, opts: &Options, out: &mut dyn Write) -> Result<()> {
    if opts.folded {
        output::write_folded(m, opts, out)
    } else {
        stream_out::write_stream(m, out)
    }
}
