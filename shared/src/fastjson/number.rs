//! Integers of the stream's JSON as serde_json reads them (see
//! [`super`]), eight digits at a time.

/// An unsigned integer as serde_json reads one (no sign, fraction,
/// exponent or leading zero; no overflow) at `b[i]`, and the index after it.
/// Eight digits at a time: a stream's addresses are 15 to 20 digits, and
/// a digit at a time was a sixth of stacksym's run. Each word of 8 bytes
/// is read once: its leading digits counted and added together (counted
/// first, then added, each byte was read twice).
#[inline(always)]
pub(super) fn number(b: &[u8], i: usize) -> Option<(u64, usize)> {
    let mut v = 0u64;
    let mut j = i;
    let end = loop {
        if j + 8 > b.len() {
            // The input's last bytes: one at a time.
            let n = b[j..].iter().take_while(|c| c.is_ascii_digit()).count();
            for &c in &b[j..j + n] {
                v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
            }
            break j + n;
        }
        let x = load8(b, j);
        let n = leading_digits(x);
        if n == 8 {
            v = v.checked_mul(100_000_000)?.checked_add(eight_digits(x))?;
            j += 8;
            continue;
        }
        if n > 0 {
            // The bytes after them made leading zeros.
            const ZEROS: u64 = 0x3030_3030_3030_3030;
            let shift = 8 * (8 - n) as u32;
            v = v.checked_mul(10u64.pow(n as u32))?.checked_add(eight_digits(x << shift | ZEROS >> (64 - shift)))?;
        }
        break j + n;
    };
    // Too long, or a leading zero, or a float: serde's to read (or refuse).
    let digits = end - i;
    if digits == 0 || digits > 20 || (digits > 1 && b[i] == b'0') || matches!(b.get(end), Some(b'.' | b'e' | b'E')) {
        return None;
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
/// left.
fn digits_at(b: &[u8], i: usize) -> usize {
    let mut n = 0;
    while i + n + 8 <= b.len() {
        let d = leading_digits(load8(b, i + n));
        if d < 8 {
            return n + d;
        }
        n += 8;
    }
    n + b[i + n..].iter().take_while(|c| c.is_ascii_digit()).count()
}

/// How many of the 8 bytes of `x` (loaded by [`load8`]) are ASCII digits
/// before the first that is not. (Adding 6 to a byte of 0xFA or above
/// carries into the next one, but that byte is no digit, and the bytes
/// after it do not count.)
fn leading_digits(x: u64) -> usize {
    const LO: u64 = 0x0101_0101_0101_0101;
    let bad = ((x & (0xF0 * LO)) ^ (0x30 * LO)) | ((x.wrapping_add(0x06 * LO) & (0xF0 * LO)) ^ (0x30 * LO));
    if bad == 0 {
        return 8;
    }
    // The lowest byte that is not a digit.
    let nonzero = (((bad & (0x7F * LO)) + 0x7F * LO) | bad) & (0x80 * LO);
    (nonzero.trailing_zeros() / 8) as usize
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
/// twice: a tenth of stacksym's run), [`number`] inlined in the loop (a
/// call per address saved and restored six registers).
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
            for tail in ["", "]", ",1]", "}", ".5", "e5", "x"] {
                let text = format!("{c}{tail}");
                let ours = number(text.as_bytes(), 0).map(|(v, end)| (v, end == c.len()));
                // A fraction or exponent makes a float: left to serde.
                let float = tail.starts_with(['.', 'e']);
                let serde = serde_json::from_str::<u64>(&c).ok().map(|v| (v, true)).filter(|_| !float);
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
