//! One plain folded line: its stack without the kind marker, its kind,
//! and its value as written (fractional counts kept to the thousandth;
//! a two-count `difffolded.pl` line's BEFORE count too).

use std::borrow::Cow;

use wallclock_stream::folded;

use crate::kinds::{kind_index, GPU, OFF, ON, OTHER};

const KIND_MARKERS: [(&str, usize); 3] = [("_[c]", ON), ("_[o]", OFF), ("_[g]", GPU)];

/// Units of a value in thousandths, once an input has a fractional count.
pub const FRACTION_SCALE: u64 = 1000;

/// A folded line's value as written: its whole part and thousandths
/// (flamegraph.pl keeps fractional counts; inferno truncates them), and
/// on a two-count (difffolded) line the BEFORE count.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Value {
    pub whole: u64,
    pub milli: u64,
    pub before: Option<(u64, u64)>,
}

impl Value {
    /// Has a fractional part (not `.0`).
    pub fn fractional(&self) -> bool {
        self.milli != 0 || self.before.is_some_and(|(_, m)| m != 0)
    }

    /// The value in 1/`scale` units (`scale` 1 or [`FRACTION_SCALE`]).
    pub fn at(&self, scale: u64) -> u64 {
        scaled(self.whole, self.milli, scale)
    }

    /// BEFORE in 1/`scale` units.
    pub fn before_at(&self, scale: u64) -> Option<u64> {
        self.before.map(|(w, m)| scaled(w, m, scale))
    }
}

fn scaled(whole: u64, milli: u64, scale: u64) -> u64 {
    whole.saturating_mul(scale).saturating_add(milli * scale / FRACTION_SCALE)
}

/// `123`, `1.5`, `6.` -> (whole, thousandths), rounded to the nearest thousandth.
fn exact_value(text: &str) -> Option<(u64, u64)> {
    let (w, f) = text.split_once('.').unwrap_or((text, ""));
    if w.is_empty() && f.is_empty() || !w.bytes().chain(f.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole: u64 = if w.is_empty() { 0 } else { w.parse().ok()? };
    let digits: String = f.chars().chain("000".chars()).take(4).collect();
    let four: u64 = digits.parse().ok()?;
    let milli = (four + 5) / 10;
    Some(if milli == FRACTION_SCALE { (whole.saturating_add(1), 0) } else { (whole, milli) })
}

/// One folded line -> (stack without kind marker, value, kind), borrowing
/// the stack text whenever the marker is a plain suffix.
pub fn parse_folded(line: &str) -> Result<(Cow<'_, str>, Value, usize), String> {
    let (stack, _) = folded::split_line(line)?;
    // Every blank before the value separates it, as inferno reads folded
    // lines: a last frame of blanks only (perf's symbol " ", `f;  3`) is
    // the frame "", the one inferno draws there.
    let stack = stack.trim_end();
    let text = line.trim_end();
    let value_text = text.rsplit_once([' ', '\t']).map_or(text, |(_, v)| v);
    let (whole, milli) = exact_value(value_text)
        .ok_or_else(|| format!("expected a number at the end of a folded line, found {value_text:?}"))?;
    let mut value = Value { whole, milli, before: None };
    // difffolded.pl's `stack BEFORE AFTER`: a second number before the
    // value (a name ending in a number would need a marker or a `;`).
    let mut stack = stack;
    if let Some((rest, b)) = stack.rsplit_once([' ', '\t']) {
        let rest = rest.trim_end();
        if let (Some(before), false) = (exact_value(b), rest.is_empty()) {
            value.before = Some(before);
            stack = rest;
        }
    }
    let (stack, kind) = strip_marker(line, stack)?;
    Ok((stack, value, kind))
}

fn strip_marker<'a>(line: &str, stack: &'a str) -> Result<(Cow<'a, str>, usize), String> {
    // One scan for `_[c]`, `_[o]`, `_[g]` anywhere (three scans were 8% of flame's run).
    let b = stack.as_bytes();
    let mut markers = stack
        .match_indices('[')
        .map(|(i, _)| i.wrapping_sub(1))
        .filter(|&i| i < b.len() && b[i] == b'_' && matches!(b.get(i + 2..i + 4), Some([b'c' | b'o' | b'g', b']'])))
        .map(|i| (i, ()));
    match (markers.next(), markers.next()) {
        (None, _) => return Ok((Cow::Borrowed(stack), OTHER)),
        (Some((i, _)), None) if i + 4 == stack.len() => {
            let k = KIND_MARKERS.iter().find(|(m, _)| stack.ends_with(m)).map_or(OTHER, |&(_, k)| k);
            return Ok((Cow::Borrowed(&stack[..i]), k));
        }
        // A block and its waker (stackmerge --wakers): the block's leaf
        // holds the marker; the waker's frames after `--` are `_[w]`.
        (Some((i, _)), None) if stack[i..].starts_with("_[o];--;") => {
            let mut text = String::with_capacity(stack.len());
            text.push_str(&stack[..i]);
            text.push_str(&stack[i + 4..]);
            return Ok((Cow::Owned(text), OFF));
        }
        _ => {}
    }
    // A marker elsewhere (`leaf_[o]_[k]`, or not on the leaf): the shared parser decides.
    let s = folded::parse_line(&format!("{stack} 0"), 1).map_err(|e| format!("{e} (in {line:?})"))?;
    let text: Vec<String> = s.frames.iter().map(folded::frame_text).collect();
    Ok((Cow::Owned(text.join(";")), kind_index(s.kind)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_stripped_and_borrowed() {
        let (s, v, k) = parse_folded("a;b;[sleep]_[o] 12").unwrap();
        assert_eq!((s.as_ref(), v.at(1), k), ("a;b;[sleep]", 12, OFF));
        assert!(matches!(s, Cow::Borrowed(_)));
        let (s, _, k) = parse_folded("a;write_[o]_[k] 3").unwrap();
        assert_eq!((s.as_ref(), k), ("a;write_[k]", OFF));
        let (s, _, k) = parse_folded("a;b_[k] 3").unwrap();
        assert_eq!((s.as_ref(), k), ("a;b_[k]", OTHER));
        assert!(parse_folded("a;b").is_err());
        assert!(parse_folded("a;b x").is_err());
        // A blank last frame is inferno's "" frame, not a frame named " ".
        let (s, v, _) = parse_folded("a;write0_[j];  3").unwrap();
        assert_eq!((s.as_ref(), v.at(1)), ("a;write0_[j];", 3));
        // stackmerge --wakers: the block's marker before `--`, the waker after.
        let (s, _, k) = parse_folded("a;read;[sleep]_[o];--;write_[w];main_[w];w (9)_[w] 5").unwrap();
        assert_eq!((s.as_ref(), k), ("a;read;[sleep];--;write_[w];main_[w];w (9)_[w]", OFF));
    }

    #[test]
    fn fractions_and_two_counts() {
        let (s, v, _) = parse_folded("noploop;[unknown] 2.567").unwrap();
        assert_eq!((s.as_ref(), v.fractional(), v.at(1), v.at(FRACTION_SCALE)), ("noploop;[unknown]", true, 2, 2567));
        let (_, v, _) = parse_folded("a 6.").unwrap();
        assert!(!v.fractional());
        let (s, v, _) = parse_folded("main;f 274 415").unwrap();
        assert_eq!((s.as_ref(), v.before_at(1), v.at(1)), ("main;f", Some(274), 415));
        let (s, v, _) = parse_folded("main 415").unwrap();
        assert_eq!((s.as_ref(), v.before), ("main", None));
        assert!(parse_folded("a;b 1e5").is_err());
    }
}
