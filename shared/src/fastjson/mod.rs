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

mod number;
mod text;
mod write;

use number::{check_list, number, read_list};
pub use text::AddrText;
pub use write::{write_stack, write_stack_lists, write_stackdef, write_u64};

/// Reads a plain `stack` object (the record without its `"type"`: `b[0]`
/// is the `{`, or the `,` after the type, and is not looked at) and the
/// index after its closing `}`; `None` for anything serde must read. Only
/// the bytes of `comm` need be UTF-8 (checked): everything else must be
/// ASCII to be read at all. With `skip`, a record whose `stack_id` `skip`
/// accepts gets no addresses (their syntax is still checked): tools that
/// draw a stack from its frames never look at them.
pub fn parse_stack(b: &[u8], skip: Option<&dyn Fn(u32) -> bool>) -> Option<(Stack, usize)> {
    let mut s = Stack::new(Kind::Other, 0, 0, "");
    parse_stack_into(b, skip, &mut s).map(|(end, _)| (s, end))
}

/// Where the address lists of a stack record lie in its text (empty
/// ranges for lists it has not). A list that was read is written the
/// same way again: digits with no sign or leading zero, commas, no space.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListSpans {
    pub ustack: std::ops::Range<usize>,
    pub kstack: std::ops::Range<usize>,
}

/// [`parse_stack`] into `s`, whose allocations are reused (a `comm`,
/// `ustack` and `kstack` allocated and freed per record were a tenth of
/// stacksym's run), and where its address lists lie. On `None`, `s` holds
/// anything.
pub fn parse_stack_into(b: &[u8], skip: Option<&dyn Fn(u32) -> bool>, s: &mut Stack) -> Option<(usize, ListSpans)> {
    reset(s);
    let mut seen = 0u16;
    let mut lists = Lists::default();
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
        let (bit, at) = field(key, b, i, skip, s, &mut lists)?;
        i = at;
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
    if seen & 1 == 0 {
        return None; // no kind
    }
    let skipped = match (s.stack_id, skip) {
        (Some(id), Some(f)) => f(id),
        _ => false,
    };
    if !skipped {
        for (span, into) in [(lists.ustack, &mut s.ustack), (lists.kstack, &mut s.kstack)] {
            if let Some((from, n)) = span {
                into.reserve_exact(n);
                read_list(b, from, into)?;
            }
        }
    }
    Some((i + 1, lists.spans))
}

/// Where a record's address lists lie when they are read at the end.
#[derive(Default)]
struct Lists {
    /// (start, count) of a list checked now and read after `stack_id`.
    ustack: Option<(usize, usize)>,
    kstack: Option<(usize, usize)>,
    spans: ListSpans,
}

/// One field's value at `b[i..]` read into `s`: the field's bit (for
/// duplicates; `kind` is bit 0) and where the value ends. None for a field
/// or value the fast path does not take (serde reads the line instead).
#[inline]
fn field(key: &[u8], b: &[u8], mut i: usize, skip: Option<&dyn Fn(u32) -> bool>, s: &mut Stack, lists: &mut Lists) -> Option<(u16, usize)> {
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
            s.comm.push_str(std::str::from_utf8(v).ok()?);
            i = at;
            4
        }
        // Read at once unless they may be skipped (known only once
        // `stack_id` is read): then checked here, read at the end.
        b"ustack" => {
            let end = match skip {
                None => read_list(b, i, &mut s.ustack)?,
                Some(_) => {
                    let (end, n) = check_list(b, i)?;
                    lists.ustack = Some((i, n));
                    end
                }
            };
            lists.spans.ustack = i..end;
            i = end;
            5
        }
        b"kstack" => {
            let end = match skip {
                None => read_list(b, i, &mut s.kstack)?,
                Some(_) => {
                    let (end, n) = check_list(b, i)?;
                    lists.kstack = Some((i, n));
                    end
                }
            };
            lists.spans.kstack = i..end;
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
        b"object" => {
            let (v, at) = string(b, i)?;
            s.object = Some(std::str::from_utf8(v).ok()?.to_string());
            i = at;
            10
        }
        _ => return None,
    };
    Some((bit, i))
}

/// Every field of `s` as [`Stack::new`] leaves it, its allocations kept.
fn reset(s: &mut Stack) {
    // Named one by one: a field added to `Stack` must be reset here too.
    let Stack { kind, state, pid, tid, comm, ustack, kstack, frames, stack_id, ns, count, gpu, waker, pgen, object } = s;
    *kind = Kind::Other;
    *state = None;
    (*pid, *tid, *ns, *count) = (0, 0, 0, 0);
    comm.clear();
    ustack.clear();
    kstack.clear();
    frames.clear();
    *stack_id = None;
    *gpu = None;
    *waker = None;
    *pgen = None;
    *object = None;
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
    let end = read_list(b, at + FRAMES.len(), &mut frames)?;
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

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A record read into one used before reads as serde reads it, and
    /// its lists' spans are the text serde writes for them.
    #[test]
    fn reads_into_a_used_record_and_finds_its_lists() {
        let lines = [
            r#"{"kind":"off","state":"S","pid":42,"tid":43,"comm":"w","ustack":[1,18446744073709551615],"kstack":[0],"stack_id":7,"ns":5,"count":1}"#,
            r#"{"kind":"on","kstack":[3,4],"ns":2}"#,
            r#"{"ustack":[10,200],"kind":"gpu","comm":"x"}"#,
            r#"{"kind":"other"}"#,
        ];
        let mut s = Stack::new(Kind::Off, 9, 9, "old");
        s.ustack = vec![5; 40];
        s.frames = vec![crate::Frame::named("f")];
        for l in lines.iter().chain(lines.iter().rev()) {
            let (end, spans) = parse_stack_into(l.as_bytes(), None, &mut s).unwrap();
            assert_eq!(end, l.len());
            assert_eq!(Some(&s), serde(l).as_ref(), "{l}");
            let list = |v: &Vec<u64>| if v.is_empty() { String::new() } else { serde_json::to_string(v).unwrap() };
            assert_eq!(&l[spans.ustack], list(&s.ustack), "{l}");
            assert_eq!(&l[spans.kstack], list(&s.kstack), "{l}");
        }
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
}
