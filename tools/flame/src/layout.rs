//! The frame boxes of a flame graph, computed exactly as inferno's merge
//! computes them (same order, same pruning), so that each `<g>` inferno
//! writes can be matched to its box and coloured by the kinds of time
//! beneath it.

use std::cmp::Ordering;

use crate::input::Mix;

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
    fn key(b: u8) -> u8 {
        if b == b';' {
            0
        } else {
            b
        }
    }
    entries.sort_unstable_by(|a, b| cmp_frames(a.stack, b.stack, key));
}

fn cmp_frames(a: &str, b: &str, key: fn(u8) -> u8) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.iter().zip(b).position(|(x, y)| x != y);
    match n {
        Some(i) => key(a[i]).cmp(&key(b[i])),
        None => a.len().cmp(&b.len()),
    }
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
    for e in entries {
        let this = std::iter::once("").chain(e.stack.split(';'));
        let mut shared = 0;
        let mut this = this.peekable();
        while shared < open.len() && this.peek() == Some(&open[shared].name) {
            this.next();
            shared += 1;
        }
        close(&mut open, shared, &mut out, time, &cum, cum_before);
        for name in this {
            open.push(Open { name, start: time, mix_at: cum, before_at: cum_before });
        }
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
