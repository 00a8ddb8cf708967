//! Writing a capture: the stream, or bcc-compatible folded lines.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Result;
use wallclock_stream::{folded, Record, Stack, Writer};

/// Folded text of a stack: `comm;user frames;kernel frames_[k]`, root first,
/// addresses in hex (symbolize with `stacksym` on the stream for names),
/// names escaped by the one folded rule (wallclock-stream(5)).
pub fn folded_key(s: &Stack) -> String {
    let comm = if s.comm.is_empty() { "?" } else { s.comm.as_str() };
    folded::stack_text(&[comm], &folded::frames_or_addresses(s))
}

/// Names for folded output: the records piped through the `stacksym`
/// installed beside this binary, when there is one.
fn symbolized(records: &[Record]) -> Option<Vec<Record>> {
    use std::process::{Command, Stdio};
    let exe = std::env::current_exe().ok()?;
    let sym = exe.parent()?.join("stacksym");
    if !sym.exists() {
        return None;
    }
    let mut child = Command::new(sym)
        .args(["--no-lines", "-q"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .ok()?;
    let mut input = Vec::new();
    let mut w = Writer::new(&mut input);
    for r in records {
        w.write(r).ok()?;
    }
    let mut stdin = child.stdin.take()?;
    let feeder = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().ok()?;
    let _ = feeder.join();
    if !out.status.success() {
        return None;
    }
    // stacksym writes the framing WALLCLOCK_STREAM_FORMAT asks for: read either.
    wallclock_stream::Reader::new(&out.stdout[..], "stacksym", Default::default()).map(Result::ok).collect()
}

/// Write `records` as the stream, or as folded lines whose values are
/// `value(stack)` (µs for off-CPU, samples for on-CPU).
pub fn write(out: &mut dyn Write, records: &[Record], folded: bool, value: impl Fn(&Stack) -> u64) -> Result<()> {
    if folded {
        let named = symbolized(records);
        if named.is_none() {
            eprintln!("note: no stacksym beside this binary: folded frames are hex addresses");
        }
        let records = named.as_deref().unwrap_or(records);
        let mut lines: BTreeMap<String, u64> = BTreeMap::new();
        for r in records {
            if let Record::Stack(s) = r {
                *lines.entry(folded_key(s)).or_default() += value(s);
            }
        }
        for (k, v) in lines {
            if v > 0 {
                writeln!(out, "{k} {v}")?;
            }
        }
    } else {
        let mut w = Writer::from_env(&mut *out)?;
        for r in records {
            w.write(r)?;
        }
        w.flush()?;
    }
    out.flush()?;
    Ok(())
}
