//! Plain folded stacks: `root;child;leaf VALUE`, as flamegraph.pl,
//! inferno and bcc `-f` write them.
//!
//! Frame annotations follow flamegraph.pl: `_[k]` kernel, `_[i]` inlined,
//! `_[j]` JIT. wallclock adds a kind marker on the leaf: `_[c]` on-CPU,
//! `_[o]` off-CPU, `_[g]` GPU. Markers are stripped from names on input and
//! written back on output.
//!
//! This file is the only place folded text is made or read: every tool
//! writes a stack with [`stack_text`] (names escaped by [`escape`], one
//! rule, documented in wallclock-stream(5)) and reads it back with
//! [`parse_line`] / [`parse_frame`], so the same stack is the same text
//! whichever tool prints it.

use std::borrow::Cow;
use std::io::{self, Write};

use crate::idmap::IdMap;
use crate::record::{Frame, Kind, Stack};
use crate::table::Defs;

/// Parse one folded line. `unit_ns` converts the value to ns (e.g. 1000 for
/// bcc offcputime's microseconds); the raw value is kept as `count`.
pub fn parse_line(line: &str, unit_ns: u64) -> Result<Stack, String> {
    let (stack, value) = split_line(line.trim_end())?;
    let mut kind = Kind::Other;
    let mut frames: Vec<Frame> = Vec::new();
    for raw in stack.split(';') {
        let (frame, k) = parse_frame(raw);
        if let Some(k) = k {
            kind = k;
        }
        frames.push(frame);
    }
    let mut s = Stack::new(kind, 0, 0, "");
    if kind == Kind::Off {
        let funcs: Vec<&str> = frames.iter().map(|f| f.func.as_str()).collect();
        s.state = crate::accounting::state_leaf_of(&funcs);
    }
    s.frames = frames;
    s.count = value;
    s.ns = value.saturating_mul(unit_ns);
    Ok(s)
}

/// `stack VALUE` -> (stack text, value), with the errors every reader of
/// folded lines gives. Frame annotations are left in the text.
pub fn split_line(line: &str) -> Result<(&str, u64), String> {
    let (stack, value) = line
        .rsplit_once([' ', '\t'])
        .ok_or_else(|| "expected a folded line 'frame;frame;... VALUE'".to_string())?;
    let value = parse_value(value)
        .ok_or_else(|| format!("expected a number at the end of a folded line, found {value:?}"))?;
    // Blanks before the value are its separator, except a last frame
    // that is nothing else (perf's symbol " ", kept as flamegraph.pl does).
    let trimmed = stack.trim_end();
    let stack = if trimmed.ends_with(';') && trimmed.len() < stack.len() { &stack[..trimmed.len() + 1] } else { trimmed };
    if stack.is_empty() {
        return Err("folded line has a value but no stack".to_string());
    }
    Ok((stack, value))
}

fn parse_value(v: &str) -> Option<u64> {
    if let Ok(n) = v.parse::<u64>() {
        return Some(n);
    }
    // flamegraph.pl accepts fractional counts; round them.
    let f: f64 = v.parse().ok()?;
    (f.is_finite() && f >= 0.0).then(|| f.round() as u64)
}

/// Strip the annotations of one frame; return it and any kind marker.
pub fn parse_frame(raw: &str) -> (Frame, Option<Kind>) {
    let mut name = raw;
    let mut f = Frame::named("");
    let mut kind = None;
    while let Some((base, tag)) = name.strip_suffix(']').and_then(|b| b.rsplit_once("_[")) {
        match tag {
            "c" => kind = Some(Kind::On),
            "o" => kind = Some(Kind::Off),
            "g" => kind = Some(Kind::Gpu),
            "k" => f.kernel = true,
            "i" => f.inlined = true,
            "j" => f.jit = true,
            _ => break,
        }
        name = base;
    }
    f.func = unescape(name).into_owned();
    (f, kind)
}

/// The root frame of a process in folded stacks and flame graphs:
/// `NAME (PID)`, NAME being the main thread's name (the name after exec).
pub fn process_root(name: &str, pid: u32) -> String {
    let name = if name.is_empty() { "?" } else { name };
    format!("{name} ({pid})")
}

/// How a graph roots its processes: each its own `NAME (PID)`, or grouped
/// by command name (`NAME`: every `cc1` of a build in one root, as the
/// off-CPU article's system-wide graphs do).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Roots {
    /// Per pid up to [`PID_ROOTS_MAX`] processes, by command above.
    #[default]
    Auto,
    Pid,
    Command,
}

/// The most processes `Roots::Auto` shows as one root each: past a
/// handful, hundreds of boxes a few pixels wide (a build's 129 processes)
/// say less than one box per command.
pub const PID_ROOTS_MAX: usize = 8;

impl Roots {
    /// Whether a graph of `processes` processes groups them by command.
    pub fn by_command(self, processes: usize) -> bool {
        match self {
            Roots::Auto => processes > PID_ROOTS_MAX,
            Roots::Pid => false,
            Roots::Command => true,
        }
    }

    /// The root of a process's stacks.
    pub fn root(by_command: bool, name: &str, pid: u32) -> String {
        match (by_command, name.is_empty()) {
            (true, false) => name.to_string(),
            (true, true) => "?".to_string(),
            (false, _) => process_root(name, pid),
        }
    }
}

impl std::str::FromStr for Roots {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Roots::Auto),
            "pid" => Ok(Roots::Pid),
            "command" => Ok(Roots::Command),
            _ => Err(format!("unknown roots {s:?}: use auto, pid or command")),
        }
    }
}

/// The folded text of one frame: its name escaped, then its annotation
/// (no kind marker).
pub fn frame_text(f: &Frame) -> String {
    let mut s = String::with_capacity(f.func.len() + 4);
    push_frame(&mut s, f);
    s
}

fn push_frame(out: &mut String, f: &Frame) {
    out.push_str(&escape(&f.func));
    if f.kernel {
        out.push_str("_[k]");
    } else if f.inlined {
        out.push_str("_[i]");
    } else if f.jit {
        out.push_str("_[j]");
    }
}

/// Frames for folded text: the stack's named frames, else its raw
/// addresses in hex (user root first, then kernel with `_[k]`).
pub fn frames_or_addresses(s: &Stack) -> Cow<'_, [Frame]> {
    if !s.frames.is_empty() {
        return Cow::Borrowed(&s.frames);
    }
    let mut v: Vec<Frame> = s.ustack.iter().map(|a| Frame::named(format!("0x{a:x}"))).collect();
    v.extend(s.kstack.iter().map(|a| Frame::kernel(format!("0x{a:x}"))));
    Cow::Owned(v)
}

/// The one stack-to-folded function every tool writes with:
/// `root;...;frame;...` (no kind marker, no value), each root and frame
/// escaped by [`escape`], frames annotated; `[no frames]` when there are
/// none at all.
pub fn stack_text<R: AsRef<str>>(roots: &[R], frames: &[Frame]) -> String {
    stack_text_of(roots, frames)
}

/// [`stack_text`] of frames borrowed from elsewhere (a stack table).
pub fn stack_text_of<'a, R: AsRef<str>>(roots: &[R], frames: impl IntoIterator<Item = &'a Frame> + Clone) -> String {
    let mut out = String::with_capacity(frames.clone().into_iter().map(|f| f.func.len() + 1).sum::<usize>() + 16);
    for r in roots {
        if !out.is_empty() {
            out.push(';');
        }
        out.push_str(&escape(r.as_ref()));
    }
    for f in frames {
        if !out.is_empty() {
            out.push(';');
        }
        push_frame(&mut out, f);
    }
    if out.is_empty() {
        out.push_str("[no frames]");
    }
    out
}

/// [`stack_text_of`] for a reader of a stack table: each frame's text is
/// made once, not once per stack it is in (escaping every frame of 200k
/// stacks was a quarter of flame's run on a merged stream).
#[derive(Debug, Default)]
pub struct FrameTexts {
    generation: u64,
    texts: IdMap<String>,
}

impl FrameTexts {
    /// The text of the frames `ids` of `defs` (root first), as
    /// [`stack_text_of`] writes them with no roots.
    pub fn stack_text(&mut self, defs: &Defs, ids: &[u32]) -> String {
        if self.generation != defs.generation() {
            *self = FrameTexts { generation: defs.generation(), ..FrameTexts::default() };
        }
        for &f in ids {
            if !self.texts.contains(f) {
                let text = defs.frame(f).map(frame_text).unwrap_or_default();
                self.texts.insert(f, text);
            }
        }
        let text = |f: &u32| self.texts.get(*f).map_or("", String::as_str);
        let mut out = String::with_capacity(ids.iter().map(|f| text(f).len() + 1).sum());
        for f in ids {
            if !out.is_empty() {
                out.push(';');
            }
            out.push_str(text(f));
        }
        if out.is_empty() {
            out.push_str("[no frames]");
        }
        out
    }
}

/// The folded escaping rule (wallclock-stream(5), FOLDED LINES): a name is
/// data, and whatever bytes it holds must come back from a folded line as
/// they went in. Written as `%XX` (two upper-case hex digits): `%` itself,
/// `;` (the frame separator), line breaks, a space or tab at either end of
/// the name (lines are trimmed), and the `]` that would end the name in an
/// annotation (`_[k]`, `_[i]`, `_[j]`, `_[c]`, `_[o]`, `_[g]`). Everything
/// else is written as it is, so `SmallVec<[T; 8]>` is `SmallVec<[T%3B 8]>`:
/// one frame to flamegraph.pl and inferno too.
pub fn escape(name: &str) -> Cow<'_, str> {
    let b = name.as_bytes();
    let blank = |c: Option<&u8>| matches!(c, Some(b' ' | b'\t'));
    // The common case, a name with nothing to escape, in one plain scan
    // (the per-byte test below was a quarter of flame's run on a stream).
    let tail_tag = b.last() == Some(&b']') && annotated(name);
    if !tail_tag
        && !blank(b.first())
        && !blank(b.last())
        && !b.iter().any(|&c| matches!(c, b'%' | b';' | b'\n' | b'\r'))
    {
        return Cow::Borrowed(name);
    }
    let edge = |i: usize| (i == 0 || i + 1 == b.len()) && matches!(b[i], b' ' | b'\t');
    let needs = |i: usize, c: u8| matches!(c, b'%' | b';' | b'\n' | b'\r') || edge(i) || (tail_tag && i + 1 == b.len());
    let mut out = String::with_capacity(name.len() + 8);
    let mut from = 0;
    for (i, &c) in b.iter().enumerate() {
        if needs(i, c) {
            out.push_str(&name[from..i]);
            out.push_str(&format!("%{c:02X}"));
            from = i + 1;
        }
    }
    out.push_str(&name[from..]);
    Cow::Owned(out)
}

/// Does `name` end like an annotation (`..._[k]`)?
fn annotated(name: &str) -> bool {
    let Some(base) = name.strip_suffix(']') else { return false };
    base.rsplit_once("_[").is_some_and(|(_, tag)| matches!(tag, "c" | "o" | "g" | "k" | "i" | "j"))
}

const ESCAPES: [(&str, char); 7] = [
    ("%25", '%'),
    ("%3B", ';'),
    ("%0A", '\n'),
    ("%0D", '\r'),
    ("%20", ' '),
    ("%09", '\t'),
    ("%5D", ']'),
];

/// The inverse of [`escape`]. Only the sequences `escape` writes are read
/// back; any other `%` (a foreign tool's `operator%`) stays as it is.
pub fn unescape(text: &str) -> Cow<'_, str> {
    if !text.contains('%') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        match ESCAPES.iter().find(|(e, _)| rest.starts_with(e)) {
            Some((e, c)) => {
                out.push(*c);
                rest = &rest[e.len()..];
            }
            None => {
                out.push('%');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// Write `prefix;frames...<kind marker> value`.
pub fn write_line<W: Write + ?Sized>(
    w: &mut W,
    prefix: &[String],
    frames: &[Frame],
    kind: Kind,
    value: u64,
) -> io::Result<()> {
    w.write_all(stack_text(prefix, frames).as_bytes())?;
    writeln!(w, "{} {}", kind.marker(), value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::State;

    #[test]
    fn markers_round_trip() {
        let s = parse_line("main;do_io;vfs_write_[k];[io]_[o] 250", 1000).unwrap();
        assert_eq!(s.kind, Kind::Off);
        assert_eq!(s.state, Some(State::D));
        assert_eq!(s.ns, 250_000);
        assert!(s.frames[2].kernel);
        assert_eq!(s.frames[2].func, "vfs_write");
        let mut out = Vec::new();
        write_line(&mut out, &[], &s.frames, s.kind, 250).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "main;do_io;vfs_write_[k];[io]_[o] 250\n");
    }

    #[test]
    fn bad_lines() {
        assert!(parse_line("nonumber", 1).is_err());
        assert!(parse_line("a;b x", 1).is_err());
        assert!(parse_line(" 12", 1).is_err());
        assert_eq!(parse_line("a;b 1.6", 1).unwrap().count, 2);
    }

    #[test]
    fn awkward_names_round_trip() {
        let names = [
            "SmallVec<[UnparkHandle; 8]>",
            "<core::ops::Range<u64> as Iterator>::next",
            "f(\"quoted\"; 'x')",
            "100% done",
            "%3B literal",
            " lead and trail\t",
            "line\nbreak\r",
            "looks_[k]",
            "ends_[x]",
            "\u{fffd}bad byte",
        ];
        let frames: Vec<Frame> = names.iter().map(|n| Frame::named(*n)).collect();
        let mut out = Vec::new();
        write_line(&mut out, &["app (1)".to_string()], &frames, Kind::Off, 7).unwrap();
        let line = String::from_utf8(out).unwrap();
        assert_eq!(line.matches(';').count(), names.len(), "{line}");
        assert_eq!(line.lines().count(), 1);
        let s = parse_line(&line, 1).unwrap();
        let back: Vec<&str> = s.frames[1..].iter().map(|f| f.func.as_str()).collect();
        assert_eq!(back, names);
        assert!(s.frames[1..].iter().all(|f| !f.kernel), "an escaped `_[k]` is not an annotation");
        assert_eq!((s.kind, s.count), (Kind::Off, 7));
        assert_eq!(escape("SmallVec<[T; 8]>"), "SmallVec<[T%3B 8]>");
        // Made once per frame, the same text.
        let mut defs = Defs::default();
        for (i, f) in frames.iter().enumerate() {
            defs.define_frame(crate::record::FrameDef { id: i as u32, frame: f.clone() });
        }
        let ids: Vec<u32> = (0..frames.len() as u32).rev().collect();
        let want = stack_text::<&str>(&[], &ids.iter().map(|&i| frames[i as usize].clone()).collect::<Vec<_>>());
        let mut texts = FrameTexts::default();
        assert_eq!(texts.stack_text(&defs, &ids), want);
        assert_eq!(texts.stack_text(&defs, &ids), want);
        assert_eq!(texts.stack_text(&defs, &[]), "[no frames]");
        assert_eq!(unescape("operator% 50%"), "operator% 50%", "a foreign `%` stays");
    }
}
