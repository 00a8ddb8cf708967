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

/// The first line of a `perf script` sample, in any of perf's default
/// layouts (the event, the time and the cpu each optional, as perf
/// leaves them out when the recording has no such field):
///
/// ```text
/// dd 19315 [002]  98.465512:     250000 cpu-clock:
/// V8 WorkerThread 24636/25607 [000] 94564.109216: cycles:
/// java  3244 cpu-clock:
/// false 39654 19115.489713: 1 cycles:u:  ffffffff9b201293 [unknown] ([unknown])
/// ```
///
/// The pid is the first all-digit word (`PID` or `PID/TID`) after the
/// comm, as inferno's collapser finds it. After it: a time word
/// (`SECONDS.FRACTION:`) makes it a header whatever follows (a
/// tracepoint's fields); without one, an event word ending in `:` must
/// follow, then nothing or one stack frame (`ADDR SYMBOL (DSO)`), so a
/// folded line (`a;b 12`) is never taken for one.
pub fn is_perf_sample_header(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    // The comm is at least one word; the pid the first all-digit word after it.
    let Some(at) = (1..words.len()).find(|&i| is_pid_word(words[i])) else { return false };
    let mut rest = &words[at + 1..];
    while let Some((w, r)) = rest.split_first() {
        if w.starts_with('[') && w.ends_with(']') && w[1..w.len() - 1].bytes().all(|b| b.is_ascii_digit()) {
            rest = r;
        } else {
            break;
        }
    }
    if rest.first().is_some_and(|w| is_time_word(w)) {
        return true;
    }
    // [period] event: [frame]
    if rest.first().is_some_and(|w| w.bytes().all(|b| b.is_ascii_digit())) {
        rest = &rest[1..];
    }
    let Some((event, frame)) = rest.split_first() else { return false };
    event.len() > 1 && event.ends_with(':') && (frame.is_empty() || is_frame(frame))
}

/// `PID` or `PID/TID`.
fn is_pid_word(w: &str) -> bool {
    let mut parts = w.splitn(2, '/');
    parts.all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// `SECONDS.FRACTION:`.
fn is_time_word(w: &str) -> bool {
    w.strip_suffix(':').and_then(|n| n.split_once('.')).is_some_and(|(a, b)| {
        !a.is_empty() && !b.is_empty() && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit())
    })
}

/// `ADDR SYMBOL... (DSO)`: a stack line of `perf script`.
pub fn is_frame(words: &[&str]) -> bool {
    words.len() >= 2
        && words[0].bytes().all(|b| b.is_ascii_hexdigit())
        && words.last().is_some_and(|d| d.starts_with('(') && d.ends_with(')'))
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
        assert_eq!(sniff(b"weird name 1.5:\n"), InputKind::Folded, "not a sample header: no pid");
        // perf's layouts without a time, with a frame on the header line.
        for h in [
            "func_ab 15294 cpu-clock: \n\t400570 func_b (/root/lang/func_ab)\n",
            "java  3244 cpu-clock:\n",
            "V8 WorkerThread 24636/25607 [000] 94564.109216: cycles:\n",
            "false 39654 19115.489713: 1 cycles:u:  ffffffff9b201293 [unknown] ([unknown])\n",
            "swapper 0 [000] 12.5: 1 sched:sched_switch: prev_comm=a ==> next_comm=b\n",
        ] {
            assert_eq!(sniff(h.as_bytes()), InputKind::PerfScript, "{h}");
        }
        for f in ["a;b 12\n", "main;do thing 5 now: 12\n", "a 1 2\n", "x 12 y:z 3\n"] {
            assert_eq!(sniff(f.as_bytes()), InputKind::Folded, "{f}");
        }
        assert_eq!(sniff(b"\n\n"), InputKind::Empty);
        let mut w = crate::Writer::with_format(Vec::new(), crate::Format::Bincode);
        w.write(&crate::Record::Header(crate::Header::new("x", "0"))).unwrap();
        assert_eq!(sniff(&w.into_inner()), InputKind::Binary);
    }
}
