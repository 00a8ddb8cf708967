//! `stacksym [FILE...] [-o FILE]`: raw stack addresses to function names.
//!
//! Reads the wallclock stream (stdin or files) and writes it again, every
//! `stack` record that has `ustack`/`kstack` addresses and no `frames` now
//! carrying its frames (root first: user part, then kernel part) as a
//! `stack_id` of the stream's stack table: each distinct frame and stack is
//! defined once, before its first use (wallclock-stream(5), STACK TABLE).
//! Every other record passes through unchanged, `maps` records included, so
//! the output can be symbolized again.
//!
//! ```text
//! in:  {"type":"stack","kind":"off","state":"S","pid":42,"tid":42,"ustack":[94219371237552,94219371237901],"ns":5000,"count":1}
//! out: {"type":"frame","id":0,"frame":{"func":"main","module":"prog","file":"/src/prog.cc","line":40}}
//!      {"type":"frame","id":1,"frame":{"func":"ns::work(int)","module":"prog","file":"/src/prog.cc","line":12}}
//!      {"type":"stackdef","id":0,"frames":[0,1]}
//!      {"type":"stack","kind":"off","state":"S","pid":42,"tid":42,"ustack":[...],"stack_id":0,"ns":5000,"count":1}
//! ```
//!
//! Conventions relied on (producers write them): user and kernel stacks root
//! first; the last address of each is an instruction pointer, every other one
//! a return address (looked up at `addr - 1`); a `maps` record for a pid (its
//! file-backed mappings with `start`, `end`, file `offset`, `path`, optional
//! hex `build_id`) lets the pid's addresses be symbolized after it exited.
//! Within a chunk of input (4k records) a `maps` record may come after the
//! stacks it describes; across chunks it must come before them.
//!
//! Stripped files are named from their debug file where debuggers keep it
//! (`.gnu_debuglink`, `/usr/lib/debug/.build-id/`), else from `.dynsym`.
//! What stays unnamed is counted per module in the `stats` trailer
//! (`unnamed_addrs:M`, `unnamed_ns:M`, `unnamed_count:M`; a trailer is
//! added at the end of an input that had none) and its reason told once on
//! stderr.

mod debugfile;
mod engine;
mod evict;
mod gil;
mod kallsyms;
mod known;
mod knownstacks;
mod names;
mod resolve;
mod unnamed;
mod vdso;
mod wakers;

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;
use wallclock_stream::cli::{inputs_or_stdin, open_input, open_stream_output};
use wallclock_stream::fastjson::AddrText;
use wallclock_stream::{Kind, Reader, ReaderOptions, Record, Stack, Writer};

pub use engine::{Engine, Options, KERNEL_MODULE};
pub use engine::jit::{CUT, CUT_JVM};
pub use names::demangle;
pub use wakers::name_wakers;

/// Records symbolized together: addresses are deduplicated within a chunk
/// and cached across chunks. 2k, not 64k: the records of a chunk are held
/// parsed (and the text of their addresses), and the caches of the
/// processes met in the last two chunks are kept (crate::engine::cache): 30 s of
/// a machine running builds took 12 MB more at 8k than at 4k, 30 MB more
/// at 64k; at 2k, 2 MB less than at 4k (and no slower: a chunk's records
/// stay in the caches of the CPU).
const CHUNK: usize = 1 << 11;

const EXAMPLES: &str = "\
EXAMPLES:
    sudo offcputime -p 1234 10 | stacksym > off.sym
        symbolize a capture while the process still runs
    stacksym off.raw -o off.sym
        symbolize a saved stream (maps records make exited processes work)
    stacksym --no-inline --no-lines < off.raw | stackmerge --folded
        one frame per address, without file:line, straight to folded output
    stacksym --force --strip old.sym -o new.sym
        symbolize again (e.g. with debug info installed) and drop addresses

FILES OF THE TARGET:
    Files a profiled process controls are opened as such: no symbolic link
    is followed (under /proc/PID/root no component of the path may be one;
    a debug file beside a binary may not be one, and a .gnu_debuglink is a
    file name), each must be a regular file (not a fifo, socket or
    device), and /tmp/perf-PID.map must belong to the process's user (a
    process that exited: be readable by everyone) and be no older than the
    process (else an earlier process with that pid left it). A perf map
    is read up to 256 MiB, 64 KiB a line, 4 Mi lines. A file past a bound
    is skipped, said once on stderr with the reason; the rest is named.";

/// Turn the raw stack addresses of a wallclock stream into function names
/// (user code, kernel, JIT perf maps, inlined functions, demangled C++/Rust).
///
/// A stripped binary is named from its separate debug file where debuggers
/// keep it: /usr/lib/debug/.build-id/xx/yyyy.debug, or the name in its
/// .gnu_debuglink beside it, in .debug/ beside it or under
/// /usr/lib/debug/DIR/; else from its dynamic symbol table (.dynsym). What
/// stays unnamed (module+0xOFFSET) is told once per module on stderr, with
/// the reason and the debug file looked for, and counted in the stream's
/// trailer: unnamed_addrs:MODULE, unnamed_ns:MODULE, unnamed_count:MODULE.
/// A relative path in a maps record is taken from the current directory.
#[derive(Debug, Parser)]
#[command(name = "stacksym", version, after_help = EXAMPLES)]
pub struct Cli {
    /// Input streams; stdin when none or `-`.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Write the stream to FILE instead of stdout.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// One frame per address: do not show inlined functions as frames.
    #[arg(long)]
    pub no_inline: bool,
    /// Keep names as the binary has them (mangled).
    #[arg(long)]
    pub no_demangle: bool,
    /// Do not look up source file and line (faster).
    #[arg(long)]
    pub no_lines: bool,
    /// Never read live processes (/proc/PID): use only the stream's maps
    /// records and /tmp/perf-PID.map files.
    #[arg(long)]
    pub no_live: bool,
    /// Symbolize stacks that already have frames again.
    #[arg(long)]
    pub force: bool,
    /// Drop the raw addresses (ustack/kstack) of symbolized stacks.
    #[arg(long)]
    pub strip: bool,
    /// Kernel symbols from FILE instead of /proc/kallsyms.
    #[arg(long, value_name = "FILE")]
    pub kallsyms: Option<PathBuf>,
    /// No warnings about unreadable files or symbols.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Also learn the maps records of FILE (another stream of the same
    /// capture; its other records are not written): a process the
    /// on-CPU capture sampled may have its maps only in the off-CPU
    /// stream. Repeatable.
    #[arg(long = "maps", value_name = "FILE")]
    pub maps: Vec<PathBuf>,
}

impl Cli {
    pub fn options(&self) -> Options {
        Options {
            no_inline: self.no_inline,
            no_demangle: self.no_demangle,
            no_lines: self.no_lines,
            no_live: self.no_live,
            force: self.force,
            strip: self.strip,
            kallsyms: self.kallsyms.clone(),
            quiet: self.quiet,
            tool: "stacksym",
        }
    }
}

/// The clap command (for man pages and completions).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Run the tool as the command line asks.
pub fn run(cli: &Cli) -> Result<i32> {
    let mut out = open_stream_output(cli.output.as_deref())?;
    let mut engine = Engine::new(cli.options());
    engine.read_kallsyms_ahead();
    for p in &cli.maps {
        let (name, input) = open_input(p)?;
        for rec in Reader::new(input, &name, ReaderOptions::default()) {
            match rec? {
                Record::Maps(m) => engine.add_maps(&m),
                Record::Ksyms(k) => engine.add_ksyms(&k),
                _ => {}
            }
        }
    }
    for p in inputs_or_stdin(&cli.files) {
        let (name, input) = open_input(&p)?;
        symbolize_into(&mut engine, input, &name, &mut out)?;
    }
    out.flush()?;
    // The process ends here: freeing the caches and the stack table one
    // allocation at a time was 5% of its run on 1M records.
    std::mem::forget(engine);
    Ok(0)
}

/// Symbolize one input into `out` (library entry point: `BufRead -> Write`).
pub fn symbolize<R: BufRead, W: Write>(opts: Options, input: R, mut out: W) -> Result<()> {
    let mut engine = Engine::new(opts);
    symbolize_into(&mut engine, input, "<input>", &mut out)?;
    out.flush()?;
    Ok(())
}

/// Read `input` in chunks, symbolize each, write it. On a bad line, what was
/// read before it is written and flushed, then the error (naming the input
/// and line) is returned. The output's framing is `WALLCLOCK_STREAM_FORMAT`'s.
pub fn symbolize_into<R: BufRead, W: Write>(engine: &mut Engine, input: R, name: &str, out: &mut W) -> Result<()> {
    let out = &mut Writer::from_env(out)?;
    let mut trailer = false;
    // The addresses are written back as read: their text is kept (unless
    // they are dropped). The chunk's records are read into again, chunk
    // after chunk (see `Reader::next_into`); `n` of them hold this one's.
    let mut reader = Reader::new(input, name, ReaderOptions::default());
    if !engine.options().strip {
        reader = reader.keep_address_text();
    }
    let mut chunk: Vec<Record> = Vec::new();
    let mut n = 0;
    loop {
        if n == chunk.len() {
            chunk.push(Record::Stack(Stack::new(Kind::Other, 0, 0, "")));
        }
        match reader.next_into(&mut chunk[n]) {
            None => break,
            Some(Ok(())) => {
                trailer = matches!(chunk[n], Record::Stats(_));
                n += 1;
                if n >= CHUNK {
                    write_chunk(engine, &mut chunk[..n], reader.address_text().map(|t| &*t), out)?;
                    reader.address_text().map(AddrText::clear);
                    n = 0;
                }
            }
            Some(Err(e)) => {
                write_chunk(engine, &mut chunk[..n], reader.address_text().map(|t| &*t), out)?;
                out.flush()?;
                return Err(e.into());
            }
        }
    }
    write_chunk(engine, &mut chunk[..n], reader.address_text().map(|t| &*t), out)?;
    // No trailer to carry what stayed unnamed (a stream cut short): add one.
    let counts = engine.take_counts();
    if !trailer && !counts.is_empty() {
        out.write(&Record::Stats(wallclock_stream::Stats { end_ns: None, counts }))?;
    }
    Ok(())
}

/// Addresses a record of the chunk may keep room for once written (a
/// hostile record's huge lists are let go).
const KEPT_ADDRS: usize = 1 << 10;

/// Symbolize and write `chunk`, its address lists' text in `text` (one
/// entry per record) where kept.
fn write_chunk<W: Write>(engine: &mut Engine, chunk: &mut [Record], text: Option<&AddrText>, out: &mut Writer<W>) -> Result<()> {
    engine.learn_maps(chunk);
    // Wakers' stacks are named inside their records (their frames stay
    // inline: a waker is rarer than the stacks it woke).
    let mut woken: Vec<&mut wallclock_stream::Stack> = chunk
        .iter_mut()
        .filter_map(|r| match r {
            Record::Stack(s) if s.waker.is_some() => Some(s),
            _ => None,
        })
        .collect();
    wakers::name_wakers(engine, &mut woken);
    // Stacks met before: their table ids in one lookup each (the lookups
    // were a quarter of stacksym's time when made twice, for the addresses
    // to resolve and again for the id). No table id is taken across a
    // bound_memory, which may empty the table.
    engine.bound_memory();
    let mut ids = engine.known_ids(chunk);
    engine.prepare_new(chunk, &ids);
    // Each other stack's table id (its unnamed time counted) before the trailer.
    for (r, id) in chunk.iter().zip(ids.iter_mut()) {
        match r {
            Record::Stack(s) if id.is_none() && engine.needs(s) => *id = Some(engine.symbolized(s)),
            _ => {}
        }
    }
    for r in chunk.iter_mut() {
        if let Record::Stats(st) = r {
            for (k, v) in engine.take_counts() {
                *st.counts.entry(k).or_insert(0) += v;
            }
        }
    }
    // Every stack with frames is written through the stack table: each
    // distinct frame and stack is defined once, records carry its id.
    for (i, (r, id)) in chunk.iter_mut().zip(ids).enumerate() {
        let lists = text.and_then(|t| t.get(i));
        match (&mut *r, id) {
            (Record::Stack(s), Some(id)) => {
                if engine.options().strip {
                    s.ustack.clear();
                    s.kstack.clear();
                }
                out.write_stack_lists_in(s, engine.table(), id, lists)?;
            }
            (Record::Stack(s), None) if !s.frames.is_empty() => {
                let id = engine.stack_of(&s.frames);
                out.write_stack_lists_in(s, engine.table(), id, lists)?;
            }
            (r, _) => out.write(r)?,
        }
        if let Record::Stack(s) = r {
            if s.ustack.capacity() + s.kstack.capacity() > KEPT_ADDRS {
                *s = Stack::new(Kind::Other, 0, 0, "");
            } else if s.frames.capacity() > 0 {
                // A stream symbolized before: its frames come from its
                // table, never read into this record's.
                s.frames = Vec::new();
            }
        }
    }
    Ok(())
}
