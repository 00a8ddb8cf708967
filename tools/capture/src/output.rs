//! Writing a capture: the stream, or bcc-compatible folded lines.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Result;
use wallclock_stream::{Record, Stack, Writer};

/// Folded text of a stack: `comm;user frames;kernel frames_[k]`, root first,
/// addresses in hex (symbolize with `stacksym` on the stream for names).
pub fn folded_key(s: &Stack) -> String {
    let mut parts = vec![if s.comm.is_empty() { "?".to_string() } else { s.comm.replace([';', ' '], "_") }];
    if !s.frames.is_empty() {
        parts.extend(s.frames.iter().map(|f| f.func.replace([';', ' '], "_")));
    } else {
        parts.extend(s.ustack.iter().map(|a| format!("{a:#x}")));
        parts.extend(s.kstack.iter().map(|a| format!("{a:#x}_[k]")));
    }
    parts.join(";")
}

/// Write `records` as the stream, or as folded lines whose values are
/// `value(stack)` (µs for off-CPU, samples for on-CPU).
pub fn write(out: &mut dyn Write, records: &[Record], folded: bool, value: impl Fn(&Stack) -> u64) -> Result<()> {
    if folded {
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
        let mut w = Writer::new(&mut *out);
        for r in records {
            w.write(r)?;
        }
        w.flush()?;
    }
    out.flush()?;
    Ok(())
}
