//! flame: an interactive flame graph (SVG) from the wallclock stream or
//! from plain folded lines.
//!
//! ```text
//! flame [FILE...] [-o OUT.svg]
//! in:  {"type":"stack","kind":"off","state":"S","frames":[{"func":"main"},...],"ns":5000000,...}
//!      main;worker;[sleep]_[o] 5000
//! out: <svg ...> (inferno's SVG: zoom, search, tooltips with time and %)
//! ```
//!
//! One pass from the merged stacks to the SVG: our layout ([`layout`]),
//! titles and colours ([`render`]), boxes written at inferno's coordinates
//! inside its document and script ([`svg`]).

pub mod folded_line;
pub mod folded_read;
pub mod frame_name;
pub mod input;
pub mod kinds;
pub mod layout;
pub mod layout_ids;
pub mod render;
pub mod seqs;
pub mod stack_table;
pub mod stream_stacks;
pub mod svg;
pub mod title;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Parser;
use inferno::flamegraph::color::Palette;

use input::{Profile, ThreadName};
use layout::Entry;
use render::{RenderOptions, ValueUnit};

const EXAMPLES: &str = "\
COLOURS:
  Each box takes the colour of the kind of time with the largest share
  beneath it: on-CPU red-yellow (kernel frames orange), off-CPU blue (kernel
  frames aqua), GPU green (kernel frames yellow-green). The kind comes from
  the stream record's `kind`, or from the `_[c]` / `_[o]` / `_[g]` marker on
  a folded line's leaf; markers never show in labels. Folded lines without a
  marker use --colors (default hot; `_[k]` kernel, `_[j]` JIT, `_[i]`
  inlined as inferno does). A box with time of several kinds lists the split
  in its tooltip. --diff colours by AFTER - BEFORE instead: red grew, blue
  shrank, white unchanged. Wakers (stackmerge --wakers --folded: a block,
  then `--`, then who woke it, frames marked `_[w]`) are purple (kernel
  frames pink), the `--` grey, and the subtitle says which is which.

ROOTS AND TITLE:
  Stream input: the root box names the process, NAME (PID) (its main
  thread's name, after exec); with several processes it says what the graph
  covers and each process is a root below it, or past 8 processes (a build,
  a system-wide capture) each command name (--roots). The default title
  names the target (command or process names), its pid(s) or the number of
  processes, in at most 100 characters, what the graph shows
  (wall-clock, on-CPU, off-CPU or GPU time), the capture window and its
  date (UTC, from this machine's clock), from the stream headers. Folded input keeps inferno's `all` and the title `Flame Graph`.

UNITS:
  Stream records carry ns. Folded values are --unit: by default us when the
  lines carry kind markers (stackmerge --folded), else samples. perf script
  of a cpu-clock or task-clock event is weighted by period, in ns.
  Fractional counts are kept (to the thousandth). Two-count lines
  (difffolded.pl's `stack BEFORE AFTER`) draw a differential graph, as
  --diff does.

EXAMPLES:
  stackmerge --on on.txt off.txt | flame > wall.svg
  flame profile.folded --title 'my service' -o out.svg
  perf record -e cpu-clock -g -- ./app; perf script | flame > cpu.svg
  flame --inverted --min-width 0.5 merged.txt > icicle.svg
  flame --split-dir threads/ merged.json   # threads/thread_<TID>_<role>.svg
  flame --diff before.folded after.folded > diff.svg";

/// Interactive flame graph (SVG) from the wallclock stream or folded stacks.
#[derive(Debug, Parser)]
#[command(name = "flame", version, after_help = EXAMPLES)]
pub struct Cli {
    /// Inputs: stream, folded lines or perf script output (stdin when none or `-`).
    pub files: Vec<PathBuf>,
    /// Output file (default stdout).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Title at the top of the graph (default: from the stream header, the
    /// target, its pid(s), the window and its date, and the tools; "Flame
    /// Graph" for folded input).
    #[arg(long)]
    pub title: Option<String>,
    /// Second line under the title.
    #[arg(long)]
    pub subtitle: Option<String>,
    /// Image width in pixels (default: fluid, 1200 before the script runs).
    #[arg(long, value_name = "PX")]
    pub width: Option<usize>,
    /// Omit boxes narrower than this percentage of the total.
    #[arg(long, value_name = "PCT", default_value_t = 0.01)]
    pub min_width: f64,
    /// Icicle graph: roots at the top.
    #[arg(long)]
    pub inverted: bool,
    /// Palette for frames without a kind (hot, mem, io, red, green, blue,
    /// aqua, yellow, purple, orange, java, js, perl, python, rust, wakeup).
    #[arg(long, default_value = "hot", value_parser = parse_palette)]
    pub colors: Palette,
    /// Unit of folded values: ns, us, ms or samples (default: us with kind
    /// markers, ns for perf script of cpu-clock, else samples).
    #[arg(long, value_parser = ["ns", "us", "ms", "samples"])]
    pub unit: Option<String>,
    /// One SVG per thread into the directory DIR, as `wcreport
    /// --split-dir` writes one report per thread: thread_<TID>_<role>.svg
    /// (stream input; role as wcreport names it: main, the record's role,
    /// else one from the thread name).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["output", "per_thread"])]
    pub split_dir: Option<PathBuf>,
    /// Old spelling of --split-dir DIR: `--per-thread -o DIR` writes the same files; it goes in the next release (`--per-thread` is `stackmerge`'s stacks rooted at threads).
    #[arg(long, hide = true, requires = "output")]
    pub per_thread: bool,
    /// Process roots of stream input: `pid`, each process its own root
    /// NAME (PID); `command`, processes grouped by command name (every cc1
    /// of a build in one root NAME); `auto`, by pid up to 8 processes, by
    /// command above.
    #[arg(long, default_value = "auto", value_name = "auto|pid|command")]
    pub roots: wallclock_stream::folded::Roots,
    /// Differential graph: shape of AFTER, red where time grew, blue where it shrank.
    #[arg(long, num_args = 2, value_names = ["BEFORE", "AFTER"], conflicts_with_all = ["files", "per_thread", "split_dir"])]
    pub diff: Option<Vec<PathBuf>>,
}

fn parse_palette(s: &str) -> Result<Palette, String> {
    s.parse::<Palette>().map_err(|e| format!("{e}; use one of {}", Palette::VARIANTS.join(", ")))
}

/// The clap command (for man pages and completions).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Run flame as the binary does.
pub fn run(cli: &Cli) -> Result<i32> {
    let explicit_unit = cli.unit.as_deref().map(|u| match u {
        "samples" => None,
        "ns" => Some(1),
        "us" => Some(1_000),
        _ => Some(1_000_000),
    });
    let stream_folded_ns = explicit_unit.flatten().unwrap_or(1_000);
    if let Some(diff) = &cli.diff {
        return run_diff(cli, diff, explicit_unit, stream_folded_ns);
    }
    // `--per-thread -o DIR`, the old spelling, is `--split-dir DIR`.
    let split_dir = cli.split_dir.as_deref().or(cli.output.as_deref().filter(|_| cli.per_thread));
    let p = Profile::read(&cli.files, split_dir.is_some(), stream_folded_ns)?;
    // An empty input is refused, as flamegraph.pl and inferno refuse it;
    // a stream (a capture) with no stacks still draws "no stacks".
    if p.is_empty() && p.header.is_none() && p.threads.is_empty() {
        bail!("no stacks in the input: nothing to draw");
    }
    let (unit, scale) = resolve_unit(&[&p], explicit_unit)?;
    let mut opts = render_options(cli, unit, &p);
    // Two-count (difffolded) lines: a differential graph, as inferno draws them.
    opts.diff = !p.before.is_empty();
    if let Some(dir) = split_dir {
        run_per_thread(dir, &p, &opts)
    } else {
        run_one(cli, p, opts, scale)
    }
}

/// `--diff BEFORE AFTER`: one graph of AFTER coloured by the change.
fn run_diff(cli: &Cli, diff: &[PathBuf], explicit_unit: Option<Option<u64>>, stream_folded_ns: u64) -> Result<i32> {
    let mut pb = Profile::read(&diff[..1], false, stream_folded_ns)?;
    let mut pa = Profile::read(&diff[1..], false, stream_folded_ns)?;
    if [&pb, &pa].iter().all(|p| p.is_empty() && p.header.is_none() && p.threads.is_empty()) {
        bail!("no stacks in BEFORE or AFTER: nothing to draw");
    }
    // One unit for both: thousandths if either has fractional counts.
    let f = pb.fraction.max(pa.fraction).max(1);
    pb.set_fraction(f);
    pa.set_fraction(f);
    let (unit, scale) = resolve_unit(&[&pb, &pa], explicit_unit)?;
    let mut map: std::collections::HashMap<&str, Entry<'_>> = Default::default();
    let (fa, fb) = (flatten(&pa, scale, false, false), flatten(&pb, scale, false, false));
    // One stack may come as several entries (two table stacks of the
    // same text): summed.
    for (k, mix) in &fa {
        let e = map.entry(k).or_insert(Entry { stack: k, mix: [0; 4], before: 0 });
        for (m, v) in e.mix.iter_mut().zip(mix) {
            *m += v;
        }
    }
    for (k, mix) in &fb {
        map.entry(k).or_insert(Entry { stack: k, mix: [0; 4], before: 0 }).before += mix.iter().sum::<u64>();
    }
    let entries = map.into_values().collect();
    let opts = RenderOptions { diff: true, ..render_options(cli, unit, &pa) };
    write_to(cli.output.as_deref(), |w| render::render(entries, &opts, w)).map(|_| 0)
}

/// One graph of everything.
fn run_one(cli: &Cli, mut p: Profile, mut opts: RenderOptions, scale: u64) -> Result<i32> {
    let by_command = cli.roots.by_command(p.processes.len());
    opts.root = title::root_label(&p, by_command);
    // One process: it is the root box; several: one root each below it
    // (one per command name when grouped).
    if !p.has_folded() && !opts.diff {
        // A stream alone: laid out from its names, no text per stack.
        let roots: std::collections::BTreeMap<u32, u32> = if p.processes.len() > 1 {
            let names = title::process_roots(&p, by_command);
            names.iter().map(|(&pid, r)| (pid, p.seqs.intern(&wallclock_stream::folded::escape(r)))).collect()
        } else {
            Default::default()
        };
        let entries = p
            .stream
            .iter()
            .map(|((_, pid, seq), mix)| layout_ids::IdEntry { root: roots.get(&pid).copied().unwrap_or(u32::MAX), seq, mix })
            .collect();
        write_to(cli.output.as_deref(), |w| render::render_ids(&p.seqs, entries, &opts, w))?;
        std::mem::forget(p);
        return Ok(0);
    }
    let stacks = flatten(&p, scale, p.processes.len() > 1, by_command);
    let before = |s: &str| p.before.get(s).map_or(0, |b| b.saturating_mul(scale));
    let entries = stacks.iter().map(|(stack, mix)| Entry { stack, mix: *mix, before: before(stack) }).collect();
    write_to(cli.output.as_deref(), |w| render::render(entries, &opts, w))?;
    // The process ends here: freeing every stack's text one at a time
    // was 4% of its run on a stream of 200k stacks.
    std::mem::forget(stacks);
    std::mem::forget(p);
    Ok(0)
}

/// `--split-dir DIR`: a folder of one graph per thread.
fn run_per_thread(dir: &Path, p: &Profile, opts: &RenderOptions) -> Result<i32> {
    if p.has_folded() {
        bail!("--split-dir needs stream records (they carry the tid); folded lines carry no thread");
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let texts: Vec<(u32, String, input::Mix)> = p.stream.iter().map(|((tid, _, k), mix)| (tid, p.text(k), mix)).collect();
    let mut by_tid: std::collections::BTreeMap<u32, Vec<Entry<'_>>> = Default::default();
    for (tid, text, mix) in &texts {
        by_tid.entry(*tid).or_default().push(Entry { stack: text, mix: *mix, before: 0 });
    }
    for (tid, entries) in by_tid {
        let t = p.threads.get(&tid).cloned().unwrap_or_default();
        let role = thread_role(tid, &t);
        let sub = format!("thread {tid} {} ({role})", t.comm);
        let root = p.processes.get(&t.pid).map(|n| title::process_root(false, n, t.pid));
        let o = RenderOptions { subtitle: Some(opts.subtitle.clone().unwrap_or(sub)), root, ..opts.clone() };
        let path = dir.join(format!("thread_{tid}_{role}.svg"));
        write_to(Some(&path), |w| render::render(entries, &o, w))?;
    }
    Ok(0)
}

/// The display unit, and the factor for folded values: they are converted
/// to ns only when mixed with a stream.
fn resolve_unit(ps: &[&Profile], explicit: Option<Option<u64>>) -> Result<(ValueUnit, u64)> {
    let any_stream = ps.iter().any(|p| !p.stream.is_empty());
    let any_folded = ps.iter().any(|p| p.has_folded());
    let markers = ps.iter().any(|p| p.markers);
    let perf_clock_only = ps.iter().any(|p| p.perf_clock) && !ps.iter().any(|p| p.plain);
    let folded_unit = match explicit {
        Some(u) => u,
        None if markers => Some(1_000),
        None if perf_clock_only => Some(1),
        None => None,
    };
    // Fractional counts: folded values are thousandths of their unit.
    let milli = ps.iter().any(|p| p.fraction > 1);
    let per = |ns: u64| if milli { (ns / input::FRACTION_SCALE).max(1) } else { ns };
    // An event profile: its stream values count the event.
    let events: Vec<Option<&str>> = ps.iter().filter(|p| !p.stream.is_empty()).map(|p| p.header.as_ref().and_then(|h| h.event.as_deref())).collect();
    if let Some(e) = events.iter().flatten().next() {
        if any_folded || events.iter().any(|x| x != &Some(*e)) {
            bail!("a profile counting {e} (oncputime -e) mixed with input in another unit: they do not add up");
        }
        return Ok((ValueUnit::Events(Box::leak(e.to_string().into_boxed_str())), 1));
    }
    match (any_stream, any_folded, folded_unit) {
        (true, true, None) => bail!("stream input (ns) mixed with folded samples: give the folded unit with --unit"),
        (true, _, ns) => Ok((ValueUnit::Time(1), per(ns.unwrap_or(1)))),
        (false, _, Some(ns)) => Ok((ValueUnit::Time(per(ns)), 1)),
        (false, _, None) if milli => Ok((ValueUnit::SampleMillis, 1)),
        (false, _, None) => Ok((ValueUnit::Samples, 1)),
    }
}

/// All stacks of a profile; folded values times `folded_scale`; with
/// `roots`, each stream stack under its process's root `NAME (PID)`, or
/// `NAME` with `by_command` (the processes of one name then share their
/// stacks: summed).
fn flatten(p: &Profile, folded_scale: u64, roots: bool, by_command: bool) -> Vec<(std::borrow::Cow<'_, str>, input::Mix)> {
    use std::borrow::Cow;
    let names = if roots { title::process_roots(p, by_command) } else { Default::default() };
    let mut out: Vec<_> = p
        .stream
        .iter()
        .map(|((_, pid, k), m)| match names.get(&pid) {
            Some(root) => (Cow::Owned(format!("{};{}", wallclock_stream::folded::escape(root), p.text(k))), m),
            None => (Cow::<str>::Owned(p.text(k)), m),
        })
        .collect();
    if by_command && roots {
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        out.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                for (k, l) in kept.1.iter_mut().zip(later.1) {
                    *k += l;
                }
            }
            same
        });
    }
    out.extend(p.folded_stacks().map(|(k, m)| (Cow::Borrowed(k), m.map(|v| v.saturating_mul(folded_scale)))));
    out
}

/// The thread's role in file names: the one rule wcreport and stackmerge
/// use too (`accounting::role_for`), so `thread_<TID>_<role>.svg` sits
/// beside `thread_<TID>_<role>_analysis.txt`.
pub fn thread_role(tid: u32, t: &ThreadName) -> String {
    let mut th = wallclock_stream::Thread::new(wallclock_stream::pgen::split_process_key(t.pid).0, tid, &t.comm);
    th.role = t.role.clone();
    wallclock_stream::accounting::role_for(&th)
}

fn render_options(cli: &Cli, unit: ValueUnit, p: &Profile) -> RenderOptions {
    RenderOptions {
        title: cli.title.clone().unwrap_or_else(|| title::default_title(p)),
        root: None,
        subtitle: cli.subtitle.clone(),
        width: cli.width,
        min_width: cli.min_width,
        inverted: cli.inverted,
        colors: cli.colors,
        unit,
        diff: false,
    }
}

fn write_to(path: Option<&Path>, f: impl FnOnce(&mut dyn std::io::Write) -> Result<()>) -> Result<()> {
    let mut w = wallclock_stream::cli::open_output(path)?;
    f(&mut *w)?;
    w.flush()?;
    Ok(())
}
