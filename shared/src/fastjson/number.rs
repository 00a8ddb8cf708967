//! Integers of the stream's JSON as serde_json reads them (see
//! [`super`]), eight digits at a time.

/// An unsigned integer as serde_json reads one (no sign, fraction,
/// exponent or leading zero; no overflow) at `b[i]`, and the index after it.
/// Eight digits at a time: a stream's addresses are 15 to 20 digits, and
/// a digit at a time was a sixth of stacksym's run.
pub(super) fn number(b: &[u8], i: usize) -> Option<(u64, usize)> {
    let digits = digits_at(b, i);
    if digits == 0 || digits > 20 || (digits > 1 && b[i] == b'0') {
        return None;
    }
    let end = i + digits;
    if matches!(b.get(end), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    // The first `digits % 8` digits at once where 8 bytes can be read
    // from the first (the bytes before them made zeros), then 8 at a
    // time: a digit at a time, the few left of a 14-digit address were
    // a third of the parsing. Only a 20-digit number can overflow.
    let lead = digits % 8;
    let mut v = 0u64;
    let mut j = i;
    if lead > 0 {
        if i + 8 <= b.len() {
            const ZEROS: u64 = 0x3030_3030_3030_3030;
            let shift = 8 * (8 - lead) as u32;
            v = eight_digits(load8(b, i) << shift | ZEROS >> (64 - shift));
        } else {
            for &c in &b[i..i + lead] {
                v = v * 10 + u64::from(c - b'0');
            }
        }
        j += lead;
    }
    while j < end {
        v = v.checked_mul(100_000_000)?.checked_add(eight_digits(load8(b, j)))?;
        j += 8;
    }
    Some((v, end))
}

/// The 8 bytes at `b[j..j + 8]` (in bounds), first byte lowest.
fn load8(b: &[u8], j: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[j..j + 8]);
    u64::from_le_bytes(w)
}

/// How many ASCII digits start at `b[i]`, 8 bytes at a time where 8 are
/// left. (No byte of UTF-8 text is 0xF5 or above, so adding 6 to one
/// never carries into the next.)
fn digits_at(b: &[u8], i: usize) -> usize {
    const LO: u64 = 0x0101_0101_0101_0101;
    let mut n = 0;
    while i + n + 8 <= b.len() {
        let x = load8(b, i + n);
        let bad = ((x & (0xF0 * LO)) ^ (0x30 * LO)) | (((x + 0x06 * LO) & (0xF0 * LO)) ^ (0x30 * LO));
        if bad != 0 {
            // The lowest byte that is not a digit.
            let nonzero = (((bad & (0x7F * LO)) + 0x7F * LO) | bad) & (0x80 * LO);
            return n + (nonzero.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    n + b[i + n..].iter().take_while(|c| c.is_ascii_digit()).count()
}

/// The value of eight ASCII digits loaded by [`load8`] (the first digit
/// the most significant).
fn eight_digits(x: u64) -> u64 {
    let v = x - 0x3030_3030_3030_3030;
    let v = (v * 10) + (v >> 8);
    // The products wrap on purpose: the high half is the value.
    ((v & 0x0000_00FF_0000_00FF).wrapping_mul(100 + (1_000_000 << 32))
        .wrapping_add(((v >> 16) & 0x0000_00FF_0000_00FF).wrapping_mul(1 + (10_000 << 32))))
        >> 32
}

/// A list of integers at `b[i]` (`[`), checked as serde reads one (see
/// [`number`]) without computing a value: its end and its length.
pub(super) fn check_list(b: &[u8], mut i: usize) -> Option<(usize, usize)> {
    if b.get(i) != Some(&b'[') {
        return None;
    }
    i += 1;
    if b.get(i) == Some(&b']') {
        return Some((i + 1, 0));
    }
    let mut n = 0;
    loop {
        let digits = digits_at(b, i);
        let max = b"18446744073709551615";
        if digits == 0 || digits > 20 || (digits > 1 && b[i] == b'0') || (digits == 20 && &b[i..i + 20] > max) {
            return None;
        }
        n += 1;
        match b.get(i + digits) {
            Some(b',') => i += digits + 1,
            Some(b']') => return Some((i + digits + 1, n)),
            _ => return None,
        }
    }
}

/// The values of a list of integers at `b[i]` (`[`), appended to `out`,
/// and the index after its `]`: what [`check_list`] accepts, checked and
/// read in one pass (checked first, then read, the digits were walked
/// twice: a tenth of stacksym's run).
pub(super) fn read_list(b: &[u8], mut i: usize, out: &mut Vec<u64>) -> Option<usize> {
    if b.get(i) != Some(&b'[') {
        return None;
    }
    i += 1;
    if b.get(i) == Some(&b']') {
        return Some(i + 1);
    }
    loop {
        let (v, at) = number(b, i)?;
        out.push(v);
        match b.get(at) {
            Some(b',') => i = at + 1,
            Some(b']') => return Some(at + 1),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_as_serde_reads_them() {
        let mut cases: Vec<String> = ["0", "7", "10", "00", "01", "18446744073709551615", "18446744073709551616", "99999999999999999999"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for len in 1..=22 {
            for _ in 0..50 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let digits: String = (0..len).map(|k| char::from(b'0' + ((x >> (k % 60)) % 10) as u8)).collect();
                cases.push(digits);
            }
        }
        for c in cases {
            for tail in ["", "]", ",1]", "}"] {
                let text = format!("{c}{tail}");
                let ours = number(text.as_bytes(), 0).map(|(v, end)| (v, end == c.len()));
                let serde = serde_json::from_str::<u64>(&c).ok().map(|v| (v, true));
                assert_eq!(ours, serde, "{text}");
                let list = format!("[{c},{c}]");
                let checked = check_list(list.as_bytes(), 0).map(|(end, n)| (end == list.len(), n));
                let listed = serde_json::from_str::<Vec<u64>>(&list).ok();
                assert_eq!(checked, listed.as_ref().map(|v| (true, v.len())), "{list}");
                let mut read = Vec::new();
                let end = read_list(list.as_bytes(), 0, &mut read);
                assert_eq!(end.map(|e| (e == list.len(), read)), listed.map(|v| (true, v)), "{list}");
            }
        }
    }
}
