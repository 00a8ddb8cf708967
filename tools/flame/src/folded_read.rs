//! Plain folded lines, read fast: the input in blocks of whole lines
//! (1 MiB), each block checked as UTF-8 once and split at newlines in
//! place, its lines added to a [`StackTable`] a batch at a time.
//!
//! Tried and dropped: two threads, each keeping half of the key space. On
//! this 2-CPU machine shared with builds it cost 1.7x the CPU time (both
//! threads parse every line) and was slower in wall time too.

use std::io::BufRead;

use anyhow::{anyhow, Context, Result};

use crate::folded_line::{parse_folded, Value, FRACTION_SCALE};
use crate::kinds::OTHER;
use crate::stack_table::{Pending, StackTable};

const BLOCK: usize = 1 << 20;

/// Lines looked up together (their cache misses overlap).
const BATCH: usize = 64;

/// The stacks read, and whether a kind marker was seen.
pub struct Folded {
    pub table: StackTable,
    pub markers: bool,
    /// Values in 1/scale units (see [`crate::folded_line::FRACTION_SCALE`]).
    pub scale: u64,
    /// BEFORE counts of two-count (difffolded) lines.
    pub before: std::collections::HashMap<String, u64, wallclock_stream::fasthash::FastHash>,
}

impl Default for Folded {
    fn default() -> Self {
        Folded { table: StackTable::default(), markers: false, scale: 1, before: Default::default() }
    }
}

/// Read the rest of `r`, whose lines before it were `line_no`, into `into`.
pub fn read(mut r: impl BufRead, name: &str, line_no: usize, into: &mut Folded) -> Result<()> {
    let mut next_line = line_no + 1;
    let mut data: Vec<u8> = Vec::with_capacity(BLOCK);
    let mut carry: Vec<u8> = Vec::new();
    loop {
        data.clear();
        data.append(&mut carry);
        let eof = fill(&mut r, &mut data).with_context(|| format!("cannot read {name}"))?;
        if !eof {
            // Keep the last partial line for the next block.
            match data.iter().rposition(|&b| b == b'\n') {
                Some(i) => carry.extend_from_slice(&data[i + 1..]),
                None => {
                    std::mem::swap(&mut carry, &mut data);
                    continue;
                }
            }
            data.truncate(data.len() - carry.len());
        }
        // from_utf8 first: the lossy walk was 12% of the run on valid text.
        let text = match std::str::from_utf8(&data) {
            Ok(t) => std::borrow::Cow::Borrowed(t),
            Err(_) => String::from_utf8_lossy(&data),
        };
        let mut batch: Vec<Pending<'_>> = Vec::with_capacity(BATCH);
        for line in text.split('\n') {
            if let Some((stack, value, kind)) = parse_line(line).map_err(|m| anyhow!("{name}: line {next_line}: {m}"))? {
                into.markers |= kind != OTHER;
                if value.fractional() && into.scale < FRACTION_SCALE {
                    // Values so far to thousandths (the batch's first).
                    into.table.add_batch(&batch);
                    batch.clear();
                    into.table.scale(FRACTION_SCALE / into.scale);
                    for b in into.before.values_mut() {
                        *b = b.saturating_mul(FRACTION_SCALE / into.scale);
                    }
                    into.scale = FRACTION_SCALE;
                }
                if let Some(b) = value.before_at(into.scale) {
                    *into.before.entry(stack.to_string()).or_default() += b;
                }
                let p = Pending { stack, kind, value: value.at(into.scale) };
                if p.value > 0 {
                    batch.push(p);
                }
                if batch.len() == BATCH {
                    into.table.add_batch(&batch);
                    batch.clear();
                }
            }
            next_line += 1;
        }
        into.table.add_batch(&batch);
        next_line -= 1; // the split's last piece is what follows the last newline
        if eof {
            return Ok(());
        }
    }
}

type Parsed<'a> = (std::borrow::Cow<'a, str>, Value, usize);

fn parse_line(line: &str) -> std::result::Result<Option<Parsed<'_>>, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    parse_folded(line).map(Some)
}

/// Read into `data` up to [`BLOCK`] bytes; true at the end of the input.
fn fill(r: &mut impl BufRead, data: &mut Vec<u8>) -> std::io::Result<bool> {
    while data.len() < BLOCK {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(true);
        }
        let n = buf.len().min(BLOCK - data.len());
        data.extend_from_slice(&buf[..n]);
        r.consume(n);
    }
    Ok(false)
}


#[cfg(test)]
mod tests {
    use super::*;

    /// Lines are numbered across blocks (a block boundary falls inside a
    /// line here), and values sum by stack.
    #[test]
    fn bad_line_named_across_blocks() {
        let mut text = String::new();
        let mut n = 0;
        while text.len() < 3 * BLOCK + 100 {
            n += 1;
            text.push_str(&format!("main;f{};leaf_{}_[c] 2\r\n", n % 7, "x".repeat(n % 50)));
        }
        let mut f = Folded::default();
        read(std::io::Cursor::new(text.clone()), "in", 0, &mut f).unwrap();
        assert!(f.markers);
        assert_eq!(f.table.iter().map(|(_, m)| m[crate::kinds::ON]).sum::<u64>(), 2 * n as u64);
        text.push_str("main;oops\n");
        let err = read(std::io::Cursor::new(text), "in", 0, &mut Folded::default()).unwrap_err();
        assert!(err.to_string().starts_with(&format!("in: line {}: ", n + 1)), "{err}");
    }
}
