//! Plain folded stacks: `root;child;leaf VALUE`, as flamegraph.pl,
//! inferno and bcc `-f` write them.
//!
//! Frame annotations follow flamegraph.pl: `_[k]` kernel, `_[i]` inlined,
//! `_[j]` JIT. wallclock adds a kind marker on the leaf: `_[c]` on-CPU,
//! `_[o]` off-CPU, `_[g]` GPU. Markers are stripped from names on input and
//! written back on output.

use std::io::{self, Write};

use crate::record::{Frame, Kind, Stack, State};

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
        s.state = frames.last().and_then(|f| State::from_leaf_name(&f.func));
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
    let stack = stack.trim_end();
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
    loop {
        let Some(base) = name.strip_suffix(']') else { break };
        let Some((base, tag)) = base.rsplit_once("_[") else { break };
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
    f.func = name.to_string();
    (f, kind)
}

/// The root frame of a process in folded stacks and flame graphs:
/// `NAME (PID)`, NAME being the main thread's name (the name after exec).
pub fn process_root(name: &str, pid: u32) -> String {
    let name = if name.is_empty() { "?" } else { name };
    format!("{name} ({pid})")
}

/// The folded text of one frame, with its annotations (no kind marker).
pub fn frame_text(f: &Frame) -> String {
    let mut s = sanitize(&f.func);
    if f.kernel {
        s.push_str("_[k]");
    } else if f.inlined {
        s.push_str("_[i]");
    } else if f.jit {
        s.push_str("_[j]");
    }
    s
}

/// Names must not break the line format: `;` and line breaks are replaced.
pub fn sanitize(name: &str) -> String {
    if !name.contains([';', '\n', '\r']) {
        return name.to_string();
    }
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

/// Write `prefix;frames...<kind marker> value`.
pub fn write_line<W: Write + ?Sized>(
    w: &mut W,
    prefix: &[String],
    frames: &[Frame],
    kind: Kind,
    value: u64,
) -> io::Result<()> {
    let mut first = true;
    for p in prefix {
        if !first {
            w.write_all(b";")?;
        }
        first = false;
        w.write_all(sanitize(p).as_bytes())?;
    }
    for f in frames {
        if !first {
            w.write_all(b";")?;
        }
        first = false;
        w.write_all(frame_text(f).as_bytes())?;
    }
    if first {
        w.write_all(b"[no frames]")?;
    }
    writeln!(w, "{} {}", kind.marker(), value)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
