//! The one input sniffer: what an input is, from its first bytes. Every
//! reader of stacks (the [`crate::Reader`], stackmerge, flame) decides
//! with these functions, so that one input is read alike by every tool.
//!
//! - the binary framing: the input starts with its magic ([`crate::binary`]);
//! - the stream (JSON records): the first meaningful line starts with `{`;
//! - `perf script` output: the first meaningful line is a sample header,
//!   `comm pid [cpu] time: period event:`;
//! - folded lines otherwise (`a;b;c 123`; a bad one is named by its line).
//!
//! Meaningful: not empty, not a `#` comment.

use crate::binary;

/// What an input holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    Binary,
    Stream,
    PerfScript,
    Folded,
    /// Nothing meaningful (in the bytes looked at).
    Empty,
}

/// What the first meaningful line says the input is.
pub fn sniff_line(line: &str) -> InputKind {
    let t = line.trim();
    if t.is_empty() || t.starts_with('#') {
        InputKind::Empty
    } else if t.starts_with('{') {
        InputKind::Stream
    } else if is_perf_sample_header(t) {
        InputKind::PerfScript
    } else {
        InputKind::Folded
    }
}

/// What an input is, from a peek at its first bytes (a `fill_buf`).
pub fn sniff(head: &[u8]) -> InputKind {
    if binary::starts_binary(head) {
        return InputKind::Binary;
    }
    head.split(|&b| b == b'\n')
        .map(|l| sniff_line(&String::from_utf8_lossy(l)))
        .find(|k| *k != InputKind::Empty)
        .unwrap_or(InputKind::Empty)
}

/// `comm pid [cpu] time: period event:` — the first line of a `perf
/// script` sample: it ends with `:` and has a `SECONDS.FRACTION:` word.
pub fn is_perf_sample_header(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    let Some((event, before)) = words.split_last() else { return false };
    event.ends_with(':')
        && before.iter().any(|w| {
            w.strip_suffix(':')
                .is_some_and(|n| n.contains('.') && n.chars().all(|c| c.is_ascii_digit() || c == '.'))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        assert_eq!(sniff(b"\n# c\n{\"type\":\"header\"}\n"), InputKind::Stream);
        assert_eq!(sniff(b"a;b 1\n"), InputKind::Folded);
        assert_eq!(sniff(b"dd 19315 [002]  98.465512:     250000 cpu-clock:\n\tffff x\n"), InputKind::PerfScript);
        assert_eq!(sniff(b"perf-exec 19315 98.465512: 1 cpu-clock:u:\n"), InputKind::PerfScript);
        assert_eq!(sniff(b"weird name 1.5:\n"), InputKind::Folded, "not a sample header: no event after the time");
        assert_eq!(sniff(b"\n\n"), InputKind::Empty);
        let mut w = crate::Writer::with_format(Vec::new(), crate::Format::Bincode);
        w.write(&crate::Record::Header(crate::Header::new("x", "0"))).unwrap();
        assert_eq!(sniff(&w.into_inner()), InputKind::Binary);
    }
}
