//! The `stack` and `stackdef` records written by hand, the bytes serde
//! writes (see [`super`]).

use crate::record::{Kind, Stack, State};

/// Appends `{"type":"stack",...}` for `s` as serde writes it (without the
/// line feed); `false`, with nothing written, for a record with `frames`,
/// `gpu`, `waker` or `pgen`, or an `object` to escape (serde writes those).
pub fn write_stack(out: &mut Vec<u8>, s: &Stack) -> bool {
    write_stack_lists(out, s, None)
}

/// [`write_stack`], the address lists copied from `lists` (the text of
/// `ustack` and of `kstack`, as [`super::parse_stack_into`] found them
/// where `s` was read) instead of written digit by digit: writing 20M
/// addresses again was a tenth of stacksym's run. The texts must be
/// those of `s.ustack` and `s.kstack` (empty for an empty list).
pub fn write_stack_lists(out: &mut Vec<u8>, s: &Stack, lists: Option<(&[u8], &[u8])>) -> bool {
    if !s.frames.is_empty() || s.gpu.is_some() || s.waker.is_some() || s.pgen.is_some() || needs_escape(&s.comm) {
        return false;
    }
    if s.object.as_deref().is_some_and(needs_escape) {
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
    for (key, addrs, text) in [
        (&br#","ustack":"#[..], &s.ustack, lists.map(|l| l.0)),
        (br#","kstack":"#, &s.kstack, lists.map(|l| l.1)),
    ] {
        if !addrs.is_empty() {
            out.extend_from_slice(key);
            match text {
                Some(t) => out.extend_from_slice(t),
                None => write_list(out, addrs.iter().copied()),
            }
        }
    }
    if let Some(id) = s.stack_id {
        out.extend_from_slice(br#","stack_id":"#);
        write_u64(out, u64::from(id));
    }
    out.extend_from_slice(br#","ns":"#);
    write_u64(out, s.ns);
    out.extend_from_slice(br#","count":"#);
    write_u64(out, s.count);
    if let Some(o) = &s.object {
        out.extend_from_slice(br#","object":""#);
        out.extend_from_slice(o.as_bytes());
        out.push(b'"');
    }
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
    // The digits: from the highest bit set (log10(2) ~ 1233/4096), one
    // less below the power of 10 that many digits start at. (19 compares
    // for every number, mostly of 1 to 7 digits, were a third of the
    // writing once addresses were copied as read.)
    let guess = (((64 - (v | 1).leading_zeros()) * 1233) >> 12) as usize;
    let n = guess + 1 - usize::from(guess > 0 && v < POW10[guess - 1]);
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
        // Lists copied as read: the bytes serde writes.
        for l in [
            r#"{"kind":"off","state":"S","pid":42,"tid":43,"comm":"w","ustack":[1,18446744073709551615],"kstack":[0],"ns":5,"count":1}"#,
            r#"{"kstack":[3,4],"kind":"on","pid":1,"tid":1,"stack_id":2,"ns":2,"count":1}"#,
            r#"{"kind":"on","ustack":[10,200],"pid":1,"tid":1,"ns":2,"count":1}"#,
        ] {
            let mut s = Stack::new(Kind::Other, 0, 0, "");
            let (_, spans) = crate::fastjson::parse_stack_into(l.as_bytes(), None, &mut s).unwrap();
            let lists = (&l.as_bytes()[spans.ustack], &l.as_bytes()[spans.kstack]);
            let mut ours = Vec::new();
            assert!(write_stack_lists(&mut ours, &s, Some(lists)));
            assert_eq!(String::from_utf8(ours).unwrap(), serde_json::to_string(&Record::Stack(s)).unwrap(), "{l}");
        }
        let mut ours = Vec::new();
        write_stackdef(&mut ours, 3, &[0, 17, 4_000_000_000]);
        let d = Record::StackDef(crate::StackDef { id: 3, frames: vec![0, 17, 4_000_000_000] });
        assert_eq!(String::from_utf8(ours).unwrap(), serde_json::to_string(&d).unwrap());
    }
}
