//! What every wallclock binary does the same way: open inputs and outputs,
//! read records with file:line errors, and exit cleanly on a broken pipe.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::reader::{ParseError, Reader, ReaderOptions};
use crate::record::Record;

/// Run a tool's main: `Ok(code)` exits with `code`; a broken pipe exits
/// quietly with 0 (`| head`); any other error prints one line with its causes.
pub fn run_main(tool: &str, f: impl FnOnce() -> Result<i32>) -> ! {
    let code = match f() {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => 0,
        Err(e) => {
            eprintln!("{tool}: error: {e:#}");
            1
        }
    };
    std::process::exit(code)
}

pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>().is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .is_some_and(|j| j.io_error_kind() == Some(io::ErrorKind::BrokenPipe))
    })
}

/// Open `path` for reading; `-` is stdin.
pub fn open_input(path: &Path) -> Result<(String, Box<dyn BufRead>)> {
    if path == Path::new("-") {
        return Ok(("<stdin>".to_string(), Box::new(BufReader::with_capacity(1 << 16, io::stdin()))));
    }
    let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    Ok((path.display().to_string(), Box::new(BufReader::with_capacity(1 << 16, f))))
}

/// Open `path` for writing (stdout when `None` or `-`), buffered.
pub fn open_output(path: Option<&Path>) -> Result<Box<dyn Write>> {
    match path {
        None => Ok(Box::new(BufWriter::with_capacity(1 << 16, io::stdout()))),
        Some(p) if p == Path::new("-") => Ok(Box::new(BufWriter::with_capacity(1 << 16, io::stdout()))),
        Some(p) => {
            let f = File::create(p).with_context(|| format!("cannot create {}", p.display()))?;
            Ok(Box::new(BufWriter::with_capacity(1 << 16, f)))
        }
    }
}

/// Open `path` for writing as [`open_output`] does, the writes made by a
/// thread of its own ([`crate::background`]): for the filters of a
/// pipeline, which then go on with their next records while the next tool
/// reads. `flush` returns once everything is written.
pub fn open_stream_output(path: Option<&Path>) -> Result<Box<dyn Write>> {
    match path {
        Some(p) if p != Path::new("-") => {
            let f = File::create(p).with_context(|| format!("cannot create {}", p.display()))?;
            Ok(Box::new(crate::background::BackgroundWriter::new(f)))
        }
        _ => Ok(Box::new(crate::background::BackgroundWriter::new(io::stdout()))),
    }
}

/// Inputs as given; none means stdin.
pub fn inputs_or_stdin(paths: &[PathBuf]) -> Vec<PathBuf> {
    if paths.is_empty() {
        vec![PathBuf::from("-")]
    } else {
        paths.to_vec()
    }
}

/// Read every record of `paths` (stdin when empty), calling `f` on each.
/// Stops at the first bad line; the error names the file and line.
pub fn for_each_record(
    paths: &[PathBuf],
    opts: ReaderOptions,
    mut f: impl FnMut(Record) -> Result<()>,
) -> Result<()> {
    for p in inputs_or_stdin(paths) {
        let (name, r) = open_input(&p)?;
        for rec in Reader::new(r, &name, opts) {
            f(rec.map_err(anyhow::Error::from)?)?;
        }
    }
    Ok(())
}

/// Read every record of `paths` into memory.
pub fn read_all(paths: &[PathBuf], opts: ReaderOptions) -> Result<Vec<Record>, anyhow::Error> {
    let mut out = Vec::new();
    for_each_record(paths, opts, |r| {
        out.push(r);
        Ok(())
    })?;
    Ok(out)
}

/// Like [`read_all`], but keeps what was read before a bad line and returns
/// the error beside it, so a tool can still write its output and then fail.
pub fn read_all_lenient(paths: &[PathBuf], opts: ReaderOptions) -> (Vec<Record>, Option<anyhow::Error>) {
    let mut out = Vec::new();
    let res = for_each_record(paths, opts, |r| {
        out.push(r);
        Ok(())
    });
    (out, res.err())
}

/// Convenience for `ParseError` in anyhow chains.
pub fn parse_error(e: &anyhow::Error) -> Option<&ParseError> {
    e.downcast_ref::<ParseError>()
}
