//! Line numbers from a code object's location table (`co_linetable`,
//! CPython 3.11+, Objects/locations.md): one entry per run of code units,
//! a first byte `1cccclll` (code c, length l + 1 units), then by code: 15
//! no location; 14 long form (signed varint line delta, then end line
//! delta, column + 1, end column + 1 as varints); 13 no column (signed
//! varint line delta); 10-12 one line form (line delta c - 10, two column
//! bytes); 0-9 short form (same line, one column byte).

/// The line of code unit `unit` (2-byte units from the start of the
/// bytecode), from the table and the code object's first line.
pub fn line_of(table: &[u8], first_line: i64, unit: u64) -> Option<i64> {
    let mut i = 0;
    let mut at = 0u64;
    let mut line = first_line;
    while i < table.len() {
        let b = table[i];
        if b & 0x80 == 0 {
            return None; // not at an entry's first byte: a table we misread
        }
        i += 1;
        let code = (b >> 3) & 15;
        let len = u64::from(b & 7) + 1;
        let here = match code {
            15 => None,
            14 => {
                line += svarint(table, &mut i)?;
                for _ in 0..3 {
                    varint(table, &mut i)?;
                }
                Some(line)
            }
            13 => {
                line += svarint(table, &mut i)?;
                Some(line)
            }
            10..=12 => {
                line += i64::from(code - 10);
                i += 2;
                Some(line)
            }
            _ => {
                i += 1;
                Some(line)
            }
        };
        if unit < at + len {
            return here;
        }
        at += len;
    }
    None
}

/// The line of the instruction at byte offset `at` in a CPython 3.10
/// location table (`co_linetable`, Objects/lnotab_notes.txt): pairs of an
/// unsigned byte-offset delta and a signed line delta, -128 for a range
/// without a line.
pub fn line_of_310(table: &[u8], first_line: i64, at: u64) -> Option<i64> {
    let mut end = 0u64;
    let mut line = first_line;
    for pair in table.chunks_exact(2) {
        let start = end;
        end += u64::from(pair[0]);
        let d = pair[1] as i8;
        let here = if d == -128 {
            None
        } else {
            line += i64::from(d);
            Some(line)
        };
        if at >= start && at < end {
            return here;
        }
    }
    None
}

/// The line of the instruction at byte offset `at` in a CPython 3.9 line
/// number table (`co_lnotab`, 3.9's Objects/lnotab_notes.txt): pairs of
/// an unsigned byte-offset delta and a signed line delta, the line a
/// pair gives starting at its offset (3.9's `PyCode_Addr2Line`).
pub fn line_of_39(table: &[u8], first_line: i64, at: u64) -> Option<i64> {
    let mut addr = 0u64;
    let mut line = first_line;
    for pair in table.chunks_exact(2) {
        addr += u64::from(pair[0]);
        if addr > at {
            break;
        }
        line += i64::from(pair[1] as i8);
    }
    Some(line)
}

fn varint(t: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = *t.get(*i)?;
        *i += 1;
        v |= u64::from(b & 63) << shift;
        shift += 6;
        if b & 64 == 0 || shift > 60 {
            return Some(v);
        }
    }
}

fn svarint(t: &[u8], i: &mut usize) -> Option<i64> {
    let u = varint(t, i)?;
    Some(if u & 1 == 1 { -((u >> 1) as i64) } else { (u >> 1) as i64 })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 3.9.18's table of `def f(x):` / `a = 1` / `for i in range(x):` /
    /// `a += i` / (blank) / `return a`, first line 1; the lines
    /// `dis.findlinestarts` gives each of its 15 instructions.
    #[test]
    fn the_39_table() {
        let t = [0, 1, 4, 1, 12, 1, 10, 2];
        let want = [2, 2, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 6, 6];
        for (i, &l) in want.iter().enumerate() {
            assert_eq!(line_of_39(&t, 1, 2 * i as u64), Some(l), "at {}", 2 * i);
        }
    }

    #[test]
    fn the_310_table() {
        // 4 bytes at first line + 1, 6 at 2 lines back, 2 without a line,
        // 0 bytes one line on (no range), 2 at that line.
        let t = [4, 1, 6, (-2i8) as u8, 2, 0x80, 0, 1, 2, 0];
        assert_eq!(line_of_310(&t, 10, 0), Some(11));
        assert_eq!(line_of_310(&t, 10, 3), Some(11));
        assert_eq!(line_of_310(&t, 10, 4), Some(9));
        assert_eq!(line_of_310(&t, 10, 9), Some(9));
        assert_eq!(line_of_310(&t, 10, 10), None);
        assert_eq!(line_of_310(&t, 10, 12), Some(10));
        assert_eq!(line_of_310(&t, 10, 14), None);
    }

    #[test]
    fn entries_of_each_form() {
        // 2 units at first line (short form), 1 unit one line later (one
        // line form, delta 1), 3 units 5 lines back (no column: svarint 11),
        // 1 unit without a location.
        let t = [0x80 | 1, 7, 0x80 | (11 << 3), 3, 4, 0x80 | (13 << 3) | 2, 11, 0x80 | (15 << 3)];
        assert_eq!(line_of(&t, 10, 0), Some(10));
        assert_eq!(line_of(&t, 10, 1), Some(10));
        assert_eq!(line_of(&t, 10, 2), Some(11));
        assert_eq!(line_of(&t, 10, 3), Some(6));
        assert_eq!(line_of(&t, 10, 5), Some(6));
        assert_eq!(line_of(&t, 10, 6), None);
        assert_eq!(line_of(&t, 10, 7), None);
    }
}
