//! The `stack` record as our writers write it, read and written by hand.
//!
//! A stream is mostly `stack` records (1M of them in `scripts/bench
//! pipeline`), and serde's derived code was a third of `stacksym` and of
//! `stackmerge`: a field-name match, a visitor and an allocation per field
//! and address list, and on the writing side a `SerializeMap` entry per
//! field. Here a record of the plain shape — the keys below, each once, in
//! any order, no whitespace, numbers as plain digits, a `comm` with no
//! escape — is read and written directly. Anything else (a `frames`
//! list, `gpu`, `waker`, an unknown key, `null`, an escape, a space, a bad
//! number) makes [`parse_stack`] answer `None` and the caller reads the
//! line with serde, so what is accepted and every error message stay
//! serde's. [`write_stack`] writes the bytes serde would.

use crate::record::{Kind, Stack, StackDef, State};

/// Reads a plain `stack` object (the record without its `"type"`: `b[0]`
/// is the `{`, or the `,` after the type, and is not looked at) and the
/// index after its closing `}`; `None` for anything serde must read. Only
/// the bytes of `comm` need be UTF-8 (checked): everything else must be
/// ASCII to be read at all. With `skip`, a record whose `stack_id` `skip`
/// accepts gets no addresses (their syntax is still checked): tools that
/// draw a stack from its frames never look at them.
pub fn parse_stack(b: &[u8], skip: Option<&dyn Fn(u32) -> bool>) -> Option<(Stack, usize)> {
    let mut s = Stack::new(Kind::Other, 0, 0, "");
    let mut seen = 0u16;
    let mut kind = false;
    let (mut ustack, mut kstack) = (None, None);
    let mut i = 1;
    if b.get(i) == Some(&b'}') {
        return None; // no kind: serde's error
    }
    loop {
        let (key, at) = string(b, i)?;
        i = at;
        if b.get(i) != Some(&b':') {
            return None;
        }
        i += 1;
        let bit = match key {
            b"kind" => {
                let (v, at) = string(b, i)?;
                s.kind = match v {
                    b"on" => Kind::On,
                    b"off" => Kind::Off,
                    b"gpu" => Kind::Gpu,
                    b"other" => Kind::Other,
                    _ => return None,
                };
                kind = true;
                i = at;
                0
            }
            b"state" => {
                let (v, at) = string(b, i)?;
                s.state = Some(match v {
                    b"R" => State::R,
                    b"S" => State::S,
                    b"D" => State::D,
                    b"other" => State::Other,
                    _ => return None,
                });
                i = at;
                1
            }
            b"pid" => {
                let (v, at) = number(b, i)?;
                s.pid = u32::try_from(v).ok()?;
                i = at;
                2
            }
            b"tid" => {
                let (v, at) = number(b, i)?;
                s.tid = u32::try_from(v).ok()?;
                i = at;
                3
            }
            b"comm" => {
                let (v, at) = string(b, i)?;
                s.comm = std::str::from_utf8(v).ok()?.to_string();
                i = at;
                4
            }
            b"ustack" => {
                let (end, n) = check_list(b, i)?;
                ustack = Some((i, n));
                i = end;
                5
            }
            b"kstack" => {
                let (end, n) = check_list(b, i)?;
                kstack = Some((i, n));
                i = end;
                6
            }
            b"stack_id" => {
                let (v, at) = number(b, i)?;
                s.stack_id = Some(u32::try_from(v).ok()?);
                i = at;
                7
            }
            b"ns" => {
                let (v, at) = number(b, i)?;
                s.ns = v;
                i = at;
                8
            }
            b"count" => {
                let (v, at) = number(b, i)?;
                s.count = v;
                i = at;
                9
            }
            _ => return None,
        };
        if seen & (1 << bit) != 0 {
            return None; // serde's "duplicate field"
        }
        seen |= 1 << bit;
        match b.get(i) {
            Some(b',') => i += 1,
            Some(b'}') => break,
            _ => return None,
        }
    }
    if !kind {
        return None;
    }
    let skipped = match (s.stack_id, skip) {
        (Some(id), Some(f)) => f(id),
        _ => false,
    };
    if !skipped {
        for (span, into) in [(ustack, &mut s.ustack), (kstack, &mut s.kstack)] {
            if let Some((from, n)) = span {
                read_list(b, from, n, into)?;
            }
        }
    }
    Some((s, i + 1))
}

/// Reads a plain `stackdef` object (`{"id":N,"frames":[...]}` in this
/// order, as our writers write it; `b[0]` as in [`parse_stack`]) and the
/// index after it; `None` for anything serde must read. 200k of them by
/// serde were a tenth of `flame`'s run.
pub fn parse_stackdef(b: &[u8]) -> Option<(StackDef, usize)> {
    const ID: &[u8] = br#""id":"#;
    const FRAMES: &[u8] = br#","frames":"#;
    if b.get(1..1 + ID.len()) != Some(ID) {
        return None;
    }
    let (id, at) = number(b, 1 + ID.len())?;
    if b.get(at..at + FRAMES.len()) != Some(FRAMES) {
        return None;
    }
    let mut frames = Vec::new();
    let (end, n) = check_list(b, at + FRAMES.len())?;
    read_list(b, at + FRAMES.len(), n, &mut frames)?;
    if b.get(end) != Some(&b'}') {
        return None;
    }
    let frames = frames.into_iter().map(u32::try_from).collect::<Result<Vec<u32>, _>>().ok()?;
    Some((StackDef { id: u32::try_from(id).ok()?, frames }, end + 1))
}

/// A string without escapes or control bytes at `b[i]` (`"`): its bytes
/// and the index after its closing quote.
fn string(b: &[u8], i: usize) -> Option<(&[u8], usize)> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let rest = &b[i + 1..];
    let len = rest.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
    (rest[len] == b'"').then(|| (&rest[..len], i + 1 + len + 1))
}

/// An unsigned integer as serde_json reads one (no sign, fraction,
/// exponent or leading zero; no overflow) at `b[i]`, and the index after it.
/// Eight digits at a time: a stream's addresses are 15 to 20 digits, and
/// a digit at a time was a sixth of stacksym's run.
fn number(b: &[u8], i: usize) -> Option<(u64, usize)> {
    let digits = digits_at(b, i);
    if digits == 0 || digits > 20 || (digits > 1 && b[i] == b'0') {
        return None;
    }
    let end = i + digits;
    if matches!(b.get(end), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    // At most 19 digits cannot overflow; the 20th is added checked.
    let head = digits.min(19);
    let mut v = 0u64;
    let mut j = i;
    while j + 8 <= i + head {
        v = v * 100_000_000 + eight_digits(load8(b, j));
        j += 8;
    }
    for &c in &b[j..i + head] {
        v = v * 10 + u64::from(c - b'0');
    }
    if digits == 20 {
        v = v.checked_mul(10)?.checked_add(u64::from(b[i + 19] - b'0'))?;
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
fn check_list(b: &[u8], mut i: usize) -> Option<(usize, usize)> {
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

/// The `n` values of the list [`check_list`] checked at `b[i]`, into
/// `out` (one allocation of the exact size).
fn read_list(b: &[u8], mut i: usize, n: usize, out: &mut Vec<u64>) -> Option<()> {
    out.reserve_exact(n);
    for _ in 0..n {
        let (v, at) = number(b, i + 1)?;
        out.push(v);
        i = at;
    }
    Some(())
}

/// Appends `{"type":"stack",...}` for `s` as serde writes it (without the
/// line feed); `false`, with nothing written, for a record with `frames`,
/// `gpu` or `waker` (serde writes those).
pub fn write_stack(out: &mut Vec<u8>, s: &Stack) -> bool {
    if !s.frames.is_empty() || s.gpu.is_some() || s.waker.is_some() || needs_escape(&s.comm) {
        return false;
    }
    out.extend_from_slice(br#"{"type":"stack","kind":""#);
    out.extend_from_slice(match s.kind {
        Kind::On => b"on",
        Kind::Off => b"off",
        Kind::Gpu => b"gpu",
        Kind::Other => b"other",
    });
    out.push(b'"');
    if let Some(st) = s.state {
        out.extend_from_slice(br#","state":""#);
        out.extend_from_slice(match st {
            State::R => b"R",
            State::S => b"S",
            State::D => b"D",
            State::Other => b"other",
        });
        out.push(b'"');
    }
    out.extend_from_slice(br#","pid":"#);
    write_u64(out, u64::from(s.pid));
    out.extend_from_slice(br#","tid":"#);
    write_u64(out, u64::from(s.tid));
    if !s.comm.is_empty() {
        out.extend_from_slice(br#","comm":""#);
        out.extend_from_slice(s.comm.as_bytes());
        out.push(b'"');
    }
    if !s.ustack.is_empty() {
        out.extend_from_slice(br#","ustack":"#);
        write_list(out, s.ustack.iter().copied());
    }
    if !s.kstack.is_empty() {
        out.extend_from_slice(br#","kstack":"#);
        write_list(out, s.kstack.iter().copied());
    }
    if let Some(id) = s.stack_id {
        out.extend_from_slice(br#","stack_id":"#);
        write_u64(out, u64::from(id));
    }
    out.extend_from_slice(br#","ns":"#);
    write_u64(out, s.ns);
    out.extend_from_slice(br#","count":"#);
    write_u64(out, s.count);
    out.push(b'}');
    true
}

/// Appends `{"type":"stackdef","id":ID,"frames":[...]}` as serde writes it.
pub fn write_stackdef(out: &mut Vec<u8>, id: u32, frames: &[u32]) {
    out.extend_from_slice(br#"{"type":"stackdef","id":"#);
    write_u64(out, u64::from(id));
    out.extend_from_slice(br#","frames":"#);
    write_list(out, frames.iter().map(|&f| u64::from(f)));
    out.push(b'}');
}

/// What serde_json writes escaped in a string: `"`, `\` and control bytes.
fn needs_escape(s: &str) -> bool {
    s.bytes().any(|c| c == b'"' || c == b'\\' || c < 0x20)
}

fn write_list(out: &mut Vec<u8>, vals: impl Iterator<Item = u64>) {
    out.push(b'[');
    for (n, v) in vals.enumerate() {
        if n > 0 {
            out.push(b',');
        }
        write_u64(out, v);
    }
    out.push(b']');
}

/// Decimal digits of `v`, two at a time, written in place (a call to
/// memcpy per number was a tenth of the writing).
pub fn write_u64(out: &mut Vec<u8>, v: u64) {
    const POW10: [u64; 19] = {
        let mut p = [10u64; 19];
        let mut k = 1;
        while k < 19 {
            p[k] = p[k - 1] * 10;
            k += 1;
        }
        p
    };
    // The digits: compares without a chain of divisions.
    let n = 1 + POW10.iter().filter(|&&p| v >= p).count();
    // Room for the longest number, cut to its length after. Cut into
    // chunks of 8 digits first, each written on its own: one chain of
    // divisions by 100 over 20 digits was most of the writing.
    let len = out.len();
    out.extend_from_slice(&[0u8; 20]);
    let buf = &mut out[len..len + n];
    let (head, tail) = match n {
        17.. => {
            let low = (v % 100_000_000) as u32;
            let mid = ((v / 100_000_000) % 100_000_000) as u32;
            eight(&mut buf[n - 16..n - 8], mid);
            eight(&mut buf[n - 8..], low);
            (v / 10_000_000_000_000_000, n - 16)
        }
        9..=16 => {
            eight(&mut buf[n - 8..], (v % 100_000_000) as u32);
            (v / 100_000_000, n - 8)
        }
        _ => (v, n),
    };
    let mut v = head as u32;
    let mut at = tail;
    while v >= 100 {
        let p = (v % 100) as usize * 2;
        v /= 100;
        at -= 2;
        buf[at..at + 2].copy_from_slice(&PAIRS[p..p + 2]);
    }
    if v >= 10 {
        let p = v as usize * 2;
        buf[0..2].copy_from_slice(&PAIRS[p..p + 2]);
    } else {
        buf[0] = b'0' + v as u8;
    }
    out.truncate(len + n);
}

const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// Exactly eight digits of `c` (< 10^8), leading zeros included.
fn eight(out: &mut [u8], c: u32) {
    let (hi, lo) = (c / 10_000, c % 10_000);
    for (at, pair) in [(0, hi / 100), (2, hi % 100), (4, lo / 100), (6, lo % 100)] {
        let p = pair as usize * 2;
        out[at..at + 2].copy_from_slice(&PAIRS[p..p + 2]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;

    fn serde(obj: &str) -> Option<Stack> {
        serde_json::from_str(obj).ok()
    }

    /// What a parser reads of `obj` when it reads all of it.
    fn whole<T>(obj: &str, parse: impl Fn(&[u8]) -> Option<(T, usize)>) -> Option<T> {
        parse(obj.as_bytes()).filter(|(_, end)| *end == obj.len()).map(|(v, _)| v)
    }

    fn stack(obj: &str, skip: Option<&dyn Fn(u32) -> bool>) -> Option<Stack> {
        whole(obj, |b| parse_stack(b, skip))
    }

    #[test]
    fn reads_what_serde_reads_or_leaves_it_to_serde() {
        let lines = [
            r#"{"kind":"off","state":"S","pid":42,"tid":43,"comm":"w","ustack":[1,18446744073709551615],"kstack":[0],"stack_id":7,"ns":5,"count":1}"#,
            r#"{"ustack":[],"kind":"on","ns":0,"count":0}"#,
            r#"{"kind":"gpu","pid":4294967295,"comm":"ü x"}"#,
            // serde's: an error or a shape left to it.
            r#"{"kind":"on","pid":4294967296}"#,
            r#"{"kind":"on","ns":01}"#,
            r#"{"kind":"on","ns":1.0}"#,
            r#"{"kind":"on","ns":-1}"#,
            r#"{"kind":"on","ustack":[18446744073709551616]}"#,
            r#"{"kind":"on","ustack":[1,]}"#,
            r#"{"kind":"on","pid":1,"pid":2}"#,
            r#"{"kind":"on","comm":"a\"b"}"#,
            r#"{"kind":"on", "pid":1}"#,
            r#"{"kind":"on","state":null}"#,
            r#"{"kind":"bogus"}"#,
            r#"{"pid":1}"#,
            r#"{}"#,
            r#"{"kind":"on","extra":1}"#,
            r#"{"kind":"on"}x"#,
            r#"{"kind":"on","frames":[{"func":"f"}]}"#,
        ];
        for l in lines {
            if let Some(s) = stack(l, None) {
                assert_eq!(Some(s), serde(l), "{l}");
            }
        }
        assert!(stack(lines[0], None).is_some() && stack(lines[2], None).is_some());
        for l in &lines[3..] {
            assert!(stack(l, None).is_none(), "{l}");
        }
        // Skipped addresses are still checked.
        let yes = |_| true;
        let s = stack(lines[0], Some(&yes)).unwrap();
        assert!(s.ustack.is_empty() && s.kstack.is_empty() && s.stack_id == Some(7));
        let bad = r#"{"kind":"on","ustack":[1,x],"stack_id":1}"#;
        assert!(stack(bad, Some(&yes)).is_none());
    }

    #[test]
    fn stackdefs_as_serde_reads_them() {
        for l in [
            r#"{"id":3,"frames":[0,1,4294967295]}"#,
            r#"{"id":0,"frames":[]}"#,
            r#"{"id":1,"frames":[4294967296]}"#,
            r#"{"id":4294967296,"frames":[1]}"#,
            r#"{"frames":[1],"id":2}"#,
            r#"{"id":1,"frames":[1],"x":2}"#,
            r#"{"id":1,"frames":[1]}}"#,
            r#"{"id":1,"frames":[01]}"#,
        ] {
            let serde = serde_json::from_str::<StackDef>(l).ok();
            match whole(l, parse_stackdef) {
                Some(d) => assert_eq!(Some(d), serde, "{l}"),
                None => assert!(l.starts_with(r#"{"frames""#) || l.contains('x') || serde.is_none(), "{l}"),
            }
        }
        assert!(whole(r#"{"id":0,"frames":[]}"#, parse_stackdef).is_some());
    }

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
                let listed = serde_json::from_str::<Vec<u64>>(&list).ok().map(|v| (true, v.len()));
                assert_eq!(checked, listed, "{list}");
            }
        }
    }

    #[test]
    fn integers_written_as_to_string_writes_them() {
        let mut vals = vec![0, 9, 10, 99, 100, 99_999_999, 100_000_000, 10_000_000_000_000_000, u64::MAX];
        for k in 0..20 {
            let p = 10u64.pow(k);
            vals.extend([p, p - 1, p + 1, p.wrapping_mul(7).wrapping_add(12345)]);
        }
        let mut out = b"x".to_vec();
        for v in vals {
            out.truncate(1);
            write_u64(&mut out, v);
            assert_eq!(&out[1..], v.to_string().as_bytes());
        }
    }

    #[test]
    fn writes_what_serde_writes() {
        let mut s = Stack::new(Kind::Off, 42, 43, "wörker");
        s.state = Some(State::Other);
        s.ustack = vec![0, 9, 10, 99, 100, 12345678901234567890, u64::MAX];
        s.kstack = vec![1];
        s.stack_id = Some(u32::MAX);
        s.ns = 1_000_000_007;
        let bare = Stack::new(Kind::Other, 0, 0, "");
        let mut quoted = Stack::new(Kind::On, 1, 1, "a\"b\n");
        quoted.ns = 3;
        for s in [s, bare, quoted.clone()] {
            let mut ours = Vec::new();
            let done = write_stack(&mut ours, &s);
            assert_eq!(done, s.comm != quoted.comm);
            if done {
                assert_eq!(String::from_utf8(ours).unwrap(), serde_json::to_string(&Record::Stack(s)).unwrap());
            }
        }
        let mut ours = Vec::new();
        write_stackdef(&mut ours, 3, &[0, 17, 4_000_000_000]);
        let d = Record::StackDef(crate::StackDef { id: 3, frames: vec![0, 17, 4_000_000_000] });
        assert_eq!(String::from_utf8(ours).unwrap(), serde_json::to_string(&d).unwrap());
    }
}
