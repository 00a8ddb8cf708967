//! The frame boxes of a flame graph, from the distinct stacks in one pass:
//! inferno's layout (same order, same pruning), each box with the kinds of
//! time beneath it. [`crate::svg`] draws them.

use std::cmp::Ordering;

use crate::kinds::Mix;

/// One distinct stack and its value.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// `root;...;leaf`, frame annotations (`_[k]`...) kept, no kind marker.
    pub stack: &'a str,
    /// Value by kind; the box width is the sum.
    pub mix: Mix,
    /// Differential mode: the value in the BEFORE profile.
    pub before: u64,
}

impl Entry<'_> {
    pub fn total(&self) -> u64 {
        self.mix.iter().sum()
    }
}

/// One frame box. Depth 0 is the `all` root (empty name).
#[derive(Debug, Clone, PartialEq)]
pub struct FrameBox<'a> {
    pub name: &'a str,
    pub depth: usize,
    pub start: u64,
    pub end: u64,
    pub mix: Mix,
    pub before: u64,
}

/// Sort stacks frame by frame (`;` sorts before every other byte), so that
/// all stacks under one frame are adjacent and the frame is drawn once.
/// Plain string order would split `a;b;c` from `a;b` by `a;b-x`.
pub fn sort_entries(entries: &mut [Entry<'_>]) {
    // `;` first, every other byte after it and apart (a NUL byte mapped
    // to `;`'s key made two different stacks equal: no total order, and
    // the sort panicked on a fuzzed input).
    fn key(b: u8) -> u16 {
        if b == b';' {
            0
        } else {
            u16::from(b) + 1
        }
    }
    entries.sort_unstable_by(|a, b| cmp_frames(a.stack, b.stack, key));
}

fn cmp_frames(a: &str, b: &str, key: fn(u8) -> u16) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let i = common_prefix(a, b);
    match (a.get(i), b.get(i)) {
        (Some(&x), Some(&y)) => key(x).cmp(&key(y)),
        _ => a.len().cmp(&b.len()),
    }
}

/// Length of the common prefix, 8 bytes at a time (sorted stacks share
/// most of their bytes: a byte loop was a third of the run time).
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let x = u64::from_le_bytes(a[i..i + 8].try_into().unwrap());
        let y = u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        if x != y {
            return i + ((x ^ y).trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

/// How many leading frames `cur` shares with `prev`.
fn shared_frames(prev: &str, cur: &str) -> usize {
    let (a, b) = (prev.as_bytes(), cur.as_bytes());
    let p = common_prefix(a, b);
    let frames = b[..p].iter().filter(|&&c| c == b';').count();
    // The frame ending at p is shared when it ends there in both.
    let ends = |s: &[u8]| s.get(p).is_none_or(|&c| c == b';');
    frames + usize::from(ends(a) && ends(b))
}

/// Boxes in the order inferno emits them (a box is emitted when it closes,
/// shallowest first), with the total. Entries must be sorted. Boxes
/// narrower than `min_width` percent are dropped as inferno drops them (with
/// its arithmetic), and so are empty ones (inferno is given no empty stack).
pub fn boxes<'a>(entries: &[Entry<'a>], min_width: f64) -> (Vec<FrameBox<'a>>, u64) {
    struct Open<'a> {
        name: &'a str,
        start: u64,
        mix_at: Mix,
        before_at: u64,
    }
    let total: u64 = entries.iter().map(Entry::total).sum();
    let widthpertime_pct = 100.0 / total as f64;
    let minwidth_time = min_width / widthpertime_pct;
    let mut out = Vec::new();
    let mut open: Vec<Open<'a>> = Vec::new();
    let mut time = 0u64;
    let mut cum: Mix = [0; 4];
    let mut cum_before = 0u64;
    let close = |open: &mut Vec<Open<'a>>, from: usize, out: &mut Vec<FrameBox<'a>>, time: u64, cum: &Mix, cb: u64| {
        for (i, o) in open.drain(from..).enumerate() {
            if time == o.start || ((time - o.start) as f64) < minwidth_time {
                continue;
            }
            let mut mix = *cum;
            for (m, a) in mix.iter_mut().zip(o.mix_at) {
                *m -= a;
            }
            out.push(FrameBox {
                name: o.name,
                depth: from + i,
                start: o.start,
                end: time,
                mix,
                before: cb - o.before_at,
            });
        }
    };
    let mut prev: Option<&str> = None;
    for e in entries {
        // open holds the root and every frame of the previous stack.
        let shared = match prev {
            None => {
                open.push(Open { name: "", start: time, mix_at: cum, before_at: cum_before });
                0
            }
            Some(p) => shared_frames(p, e.stack),
        };
        close(&mut open, shared + 1, &mut out, time, &cum, cum_before);
        for name in e.stack.split(';').skip(shared) {
            open.push(Open { name, start: time, mix_at: cum, before_at: cum_before });
        }
        prev = Some(e.stack);
        time += e.total();
        for (c, m) in cum.iter_mut().zip(e.mix) {
            *c += m;
        }
        cum_before += e.before;
    }
    close(&mut open, 0, &mut out, time, &cum, cum_before);
    (out, time)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(stack: &str, v: u64) -> Entry<'_> {
        Entry { stack, mix: [v, 0, 0, 0], before: 0 }
    }

    #[test]
    fn frame_order_groups_children() {
        let mut v = vec![e("a;b-x", 1), e("a;b;c", 2), e("a;b", 3)];
        sort_entries(&mut v);
        let s: Vec<_> = v.iter().map(|e| e.stack).collect();
        assert_eq!(s, ["a;b", "a;b;c", "a;b-x"]);
        let (b, total) = boxes(&v, 0.0);
        assert_eq!(total, 6);
        let bb: Vec<_> = b.iter().map(|b| (b.name, b.depth, b.start, b.end)).collect();
        // closed in inferno's order: when the next line diverges, shallowest first.
        assert_eq!(bb, [("b", 2, 0, 5), ("c", 3, 3, 5), ("", 0, 0, 6), ("a", 1, 0, 6), ("b-x", 2, 5, 6)]);
    }

    #[test]
    fn shared_frames_at_frame_boundaries() {
        assert_eq!(shared_frames("a;b", "a;c"), 1);
        assert_eq!(shared_frames("a;bc", "a;bd"), 1);
        assert_eq!(shared_frames("a", "a;b"), 1);
        assert_eq!(shared_frames("a;b", "a"), 1);
        assert_eq!(shared_frames("a;c", "ab"), 0);
        assert_eq!(shared_frames("long_frame_name_x;b", "long_frame_name_x;b;c"), 2);
        assert_eq!(shared_frames("", "a"), 0);
        // Stacks with empty frames keep them.
        let mut v = vec![e("", 1), e("a", 2), e("a;", 3)];
        sort_entries(&mut v);
        let (b, _) = boxes(&v, 0.0);
        let bb: Vec<_> = b.iter().map(|b| (b.name, b.depth, b.start, b.end)).collect();
        assert_eq!(bb, [("", 1, 0, 1), ("", 0, 0, 6), ("a", 1, 1, 6), ("", 2, 3, 6)]);
    }

    #[test]
    fn mix_per_box() {
        let v = vec![
            Entry { stack: "m;x", mix: [5, 0, 0, 0], before: 0 },
            Entry { stack: "m;y", mix: [0, 7, 0, 0], before: 0 },
        ];
        let (b, _) = boxes(&v, 0.0);
        let m = b.iter().find(|b| b.name == "m").unwrap();
        assert_eq!(m.mix, [5, 7, 0, 0]);
        let y = b.iter().find(|b| b.name == "y").unwrap();
        assert_eq!((y.start, y.mix), (5, [0, 7, 0, 0]));
    }
}
