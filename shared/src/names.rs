//! Names that are not text: the one check every tool applies.
//!
//! Frame names, source files and thread names come from memory the
//! profiler does not own: a CPython code object read while it was being
//! freed gave `py::\0\0\0\0:weakref.py`, a thread can name itself with any
//! bytes (`prctl(PR_SET_NAME)`), a perf map is a file the target writes.
//! Written as they are, such bytes break every text output: a NUL or most
//! other control characters make an SVG that is not XML (XML 1.0 forbids
//! them even escaped), a newline splits a folded line in two.
//!
//! So a name that is not printable text is replaced, where it enters (the
//! capture, `stacksym`) and again wherever a stream is read (the
//! [`Reader`](crate::Reader)), by [`BAD_NAME`] followed by the name with
//! each offending character written as an escape: `\xHH` for a control
//! character (U+0000-U+001F, U+007F-U+009F) or a byte that was not UTF-8,
//! `\u{HHHH}` for U+FFFD (bytes already decoded lossily) and the
//! non-characters U+FFFE/U+FFFF. The result is printable text, so the check
//! is idempotent: a stream passed through several tools is marked once.
//! Each replacement is counted (see [`replaced`]); the tools that write a
//! `stats` trailer add the count as `bad_names`.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// The marker that starts a name that was not printable text.
pub const BAD_NAME: &str = "[bad name] ";

/// The `stats` key counting names replaced.
pub const STATS_KEY: &str = "bad_names";

static REPLACED: AtomicU64 = AtomicU64::new(0);

/// Names this process replaced so far.
pub fn replaced() -> u64 {
    REPLACED.load(Ordering::Relaxed)
}

/// A character that is not printable text (or cannot be in an XML document).
fn bad_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{FFFD}' | '\u{FFFE}' | '\u{FFFF}')
}

/// Is `s` printable text, to be written as it is?
pub fn is_clean(s: &str) -> bool {
    // Most names are ASCII: one pass over the bytes.
    if s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return true;
    }
    !s.chars().any(bad_char)
}

/// `s` as it is when it is printable text, else the marked, escaped form.
pub fn check(s: &str) -> Cow<'_, str> {
    if is_clean(s) {
        return Cow::Borrowed(s);
    }
    REPLACED.fetch_add(1, Ordering::Relaxed);
    let mut out = String::with_capacity(BAD_NAME.len() + s.len() + 16);
    out.push_str(BAD_NAME);
    for c in s.chars() {
        push_char(&mut out, c);
    }
    Cow::Owned(out)
}

/// Replace `s` in place when it is not printable text (see [`check`]).
pub fn check_in_place(s: &mut String) {
    if let Cow::Owned(o) = check(s) {
        *s = o;
    }
}

/// Bytes read from a target (a `comm`, a string object) as a name: valid
/// printable UTF-8 as it is, else marked, each byte that is not part of
/// valid UTF-8 written as `\xHH` (kept, unlike a lossy decoding's U+FFFD).
pub fn from_bytes(b: &[u8]) -> String {
    if let Ok(s) = std::str::from_utf8(b) {
        return check(s).into_owned();
    }
    REPLACED.fetch_add(1, Ordering::Relaxed);
    let mut out = String::from(BAD_NAME);
    for chunk in b.utf8_chunks() {
        chunk.valid().chars().for_each(|c| push_char(&mut out, c));
        for byte in chunk.invalid() {
            let _ = write!(out, "\\x{byte:02x}");
        }
    }
    out
}

/// Every name a record carries, checked (the reader's one hook).
pub fn check_record(rec: &mut crate::Record) {
    use crate::Record;
    match rec {
        Record::Thread(t) => {
            check_in_place(&mut t.comm);
            t.role.as_mut().map(check_in_place);
        }
        Record::Stack(s) => {
            check_in_place(&mut s.comm);
            s.frames.iter_mut().for_each(check_frame);
            if let Some(g) = s.gpu.as_mut().and_then(|g| g.name.as_mut()) {
                check_in_place(g);
            }
            if let Some(w) = s.waker.as_deref_mut() {
                check_waker(w);
            }
        }
        Record::Frame(d) => check_frame(&mut d.frame),
        Record::Slice(s) => {
            if let Some(w) = s.waker.as_mut() {
                check_waker(w);
            }
            if let Some(g) = s.gpu.as_mut().and_then(|g| g.name.as_mut()) {
                check_in_place(g);
            }
        }
        Record::SliceStack(s) => s.frames.iter_mut().for_each(check_frame),
        // The frames named in a process (Python's), not its paths: those
        // are files to open.
        Record::Maps(m) => m.names.iter_mut().for_each(|n| check_frame(&mut n.frame)),
        // Names the user gave in a spec, checked as comms are.
        Record::Probe(p) => check_in_place(&mut p.probe),
        Record::Span(s) => check_in_place(&mut s.name),
        // Names a stream carries into frames (a stream may be written by
        // anyone): checked as frames are.
        Record::Ksyms(k) => {
            check_in_place(&mut k.module);
            k.syms.iter_mut().for_each(|s| check_in_place(&mut s.name));
        }
        Record::Header(_) | Record::Stats(_) | Record::StackDef(_) => {}
    }
}

/// A frame's function, module and file names, checked.
pub fn check_frame(f: &mut crate::Frame) {
    check_in_place(&mut f.func);
    f.module.as_mut().map(check_in_place);
    f.file.as_mut().map(check_in_place);
}

fn check_waker(w: &mut crate::Waker) {
    check_in_place(&mut w.comm);
    w.frames.iter_mut().for_each(check_frame);
    if let Some(b) = w.blocked.as_deref_mut() {
        b.frames.iter_mut().for_each(check_frame);
        if let Some(next) = b.waker.as_deref_mut() {
            check_waker(next);
        }
    }
}

fn push_char(out: &mut String, c: char) {
    match c {
        c if (c as u32) < 0x100 && c.is_control() => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if bad_char(c) => {
            let _ = write!(out, "\\u{{{:04x}}}", c as u32);
        }
        c => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_names_pass() {
        for s in ["main", "ns::f<int>(char const*)", "py::f:/a b.py", "héllo", "日本", ""] {
            assert!(matches!(check(s), Cow::Borrowed(_)), "{s}");
        }
    }

    #[test]
    fn control_characters_are_escaped_and_marked() {
        assert_eq!(check("py::\0\0:/w.py"), "[bad name] py::\\x00\\x00:/w.py");
        assert_eq!(check("a\nb\tc\x7f\u{85}"), "[bad name] a\\x0ab\\x09c\\x7f\\x85");
        assert_eq!(check("x\u{FFFD}y\u{FFFF}"), "[bad name] x\\u{fffd}y\\u{ffff}");
        // Marked once: the marked form is clean.
        let once = check("a\u{1}").into_owned();
        assert_eq!(check(&once), once);
    }

    #[test]
    fn invalid_utf8_bytes_are_kept_as_escapes() {
        assert_eq!(from_bytes(b"ok"), "ok");
        assert_eq!(from_bytes(b"a\xff\xfeb\x01"), "[bad name] a\\xff\\xfeb\\x01");
        assert_eq!(from_bytes("é\n".as_bytes()), "[bad name] é\\x0a");
    }

    #[test]
    fn every_control_byte_is_bad() {
        for b in (0u8..0x20).chain([0x7f]) {
            let s = String::from(char::from(b));
            assert!(!is_clean(&s), "{b:#x}");
            assert_eq!(check(&s), format!("{BAD_NAME}\\x{b:02x}"));
        }
    }
}
