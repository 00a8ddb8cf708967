//! Writing a capture: the stream, or bcc-compatible folded lines.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Result;
use stacksym::{Engine, Options};
use wallclock_stream::{folded, Record, Stack, Writer};

/// Folded text of a stack: `comm;user frames;kernel frames_[k]`, root first,
/// addresses in hex (symbolize with `stacksym` on the stream for names),
/// names escaped by the one folded rule (wallclock-stream(5)).
pub fn folded_key(s: &Stack) -> String {
    let comm = if s.comm.is_empty() { "?" } else { s.comm.as_str() };
    folded::stack_text(&[comm], &folded::frames_or_addresses(s))
}

/// Names for folded output, found in-process through the stacksym library
/// the way `stacksym --no-lines` would (the capture's maps records first,
/// then the live processes). No other program is run, so a copy of this
/// binary alone names frames as well as an installed toolkit. What stays
/// unnamed is said once per module on stderr, in one line, by the engine
/// (`TOOL: warning: frames left as MODULE+0x...: WHY`).
fn symbolized(tool: &'static str, records: &[Record]) -> Vec<Record> {
    let mut engine = Engine::new(Options { no_lines: true, tool, ..Options::default() });
    if let Some(Record::Ksyms(k)) = crate::bpfsyms::record() {
        engine.add_ksyms(&k);
    }
    engine.prepare_records(records);
    records
        .iter()
        .map(|r| match r {
            Record::Stack(s) if engine.needs(s) => {
                let mut s = s.clone();
                s.frames = engine.frames(&s);
                Record::Stack(s)
            }
            r => r.clone(),
        })
        .collect()
}

/// Write `records` as the stream, or as folded lines whose values are
/// `value(stack)` (µs for off-CPU, samples for on-CPU).
pub fn write(
    tool: &'static str,
    out: &mut dyn Write,
    records: &[Record],
    folded: bool,
    value: impl Fn(&Stack) -> u64,
) -> Result<()> {
    if folded {
        let records = symbolized(tool, records);
        let mut lines: BTreeMap<String, u64> = BTreeMap::new();
        for r in &records {
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
        write_stream(&mut *out, records.iter().map(|r| Ok(Cow::Borrowed(r))))?;
    }
    out.flush()?;
    Ok(())
}

/// Write records as the stream, as they come.
pub fn write_stream<'a>(out: &mut dyn Write, records: impl Iterator<Item = std::io::Result<Cow<'a, Record>>>) -> Result<()> {
    let mut w = Writer::from_env(&mut *out)?;
    // Names read from the targets that were not printable text (marked
    // where they were read: wallclock_stream::names), in the trailer.
    let bad = wallclock_stream::names::replaced();
    // The capture's BPF programs (crate::bpfsyms), before any stack.
    let mut ksyms = crate::bpfsyms::record();
    for r in records {
        let r = r?;
        if !matches!(&*r, Record::Header(_)) {
            if let Some(k) = ksyms.take() {
                w.write(&k)?;
            }
        }
        match &*r {
            Record::Stats(st) if bad > 0 => {
                let mut st = st.clone();
                *st.counts.entry(wallclock_stream::names::STATS_KEY.into()).or_insert(0) += bad;
                w.write(&Record::Stats(st))?;
            }
            r => w.write(r)?,
        }
    }
    w.flush()?;
    out.flush()?;
    Ok(())
}
