//! [`crate::layout`] for stacks given as sequences of name ids
//! ([`crate::seqs`]): the same order and the same boxes as from their
//! folded texts, without the texts.
//!
//! The order: texts compare byte by byte with `;` before every other
//! byte. No name holds a `;` (folded names are escaped), so two texts
//! compare as their names do one by one, each name in plain byte order,
//! a stack that is a prefix of another first. Names are ranked once; a
//! stack is then compared as a short list of ranks. Equal names have one
//! id, so a shared frame is a shared id.

use crate::kinds::Mix;
use crate::layout::FrameBox;
use crate::seqs::Seqs;

/// One stack to draw: an optional root name (`u32::MAX`: none) above the
/// names of stack `seq` of a [`Seqs`], and its value.
#[derive(Debug, Clone, Copy)]
pub struct IdEntry {
    pub root: u32,
    pub seq: u32,
    pub mix: Mix,
}

impl IdEntry {
    fn total(&self) -> u64 {
        self.mix.iter().sum()
    }
}

/// The names of `e`, root first.
fn names<'s>(seqs: &'s Seqs, e: &IdEntry) -> impl Iterator<Item = u32> + 's {
    (e.root != u32::MAX).then_some(e.root).into_iter().chain(seqs.seq(e.seq).iter().copied())
}

/// Each name's place in plain byte order.
fn ranks(seqs: &Seqs) -> Vec<u32> {
    let names = seqs.names();
    let mut order: Vec<u32> = (0..names.len() as u32).collect();
    order.sort_unstable_by(|&a, &b| names[a as usize].as_bytes().cmp(names[b as usize].as_bytes()));
    let mut rank = vec![0u32; names.len()];
    for (i, n) in order.into_iter().enumerate() {
        rank[n as usize] = i as u32;
    }
    rank
}

/// Sorts `entries` as [`crate::layout::sort_entries`] sorts their texts.
///
/// Each entry is sorted on the ranks of its first names packed in one
/// number (0 past its end: a prefix sorts first), its other names
/// compared only when those are equal: comparing two lists of ranks,
/// names looked up in scattered stacks, for each comparison was a fifth
/// of flame's run on a merged stream of 200k stacks.
pub fn sort(seqs: &Seqs, entries: &mut [IdEntry]) {
    let rank = ranks(seqs);
    let bits = (u32::BITS - (rank.len() as u32).leading_zeros()).max(1);
    let per = 128 / bits;
    // Each stack's first two prefixes (its names 0-9 and 10-19 for 12-bit
    // ranks), made in the order the stacks lie in memory (the entries come
    // in a hash map's order); an entry with a root shifts them one place.
    let pre = |names: &[u32]| {
        let mut ns = names.iter();
        let mut next = || (0..per).fold(0u128, |p, _| p << bits | ns.next().map_or(0, |&n| u128::from(rank[n as usize]) + 1));
        (next(), next())
    };
    let by_seq: Vec<(u128, u128)> = (0..seqs.len() as u32).map(|id| pre(seqs.seq(id))).collect();
    let slot = |r: u128| r << (bits * (per - 1));
    let prefixes = |e: &IdEntry| {
        let (a, b) = by_seq[e.seq as usize];
        match e.root {
            u32::MAX => (a, b),
            r => (slot(u128::from(rank[r as usize]) + 1) | a >> bits, slot(a & ((1 << bits) - 1)) | b >> bits),
        }
    };
    let mut keys: Vec<(u128, u32)> = entries.iter().enumerate().map(|(i, e)| (prefixes(e).0, i as u32)).collect();
    let full = |a: u32, b: u32| {
        let ranks = |e: u32| names(seqs, &entries[e as usize]).map(|n| rank[n as usize]);
        ranks(a).cmp(ranks(b))
    };
    // On the first prefixes alone, then each run of equal ones on the
    // second, then on all names: a tie broken inside the sort read two
    // scattered stacks per comparison, and a fifth of neighbouring stacks
    // share their first 10 names.
    keys.sort_unstable_by_key(|k| k.0);
    let mut second: Vec<(u128, u32)> = Vec::new();
    for run in keys.chunk_by_mut(|a, b| a.0 == b.0).filter(|r| r.len() > 1) {
        second.clear();
        second.extend(run.iter().map(|&(_, i)| (prefixes(&entries[i as usize]).1, i)));
        second.sort_unstable_by_key(|k| k.0);
        for tie in second.chunk_by_mut(|a, b| a.0 == b.0).filter(|r| r.len() > 1) {
            tie.sort_unstable_by(|a, b| full(a.1, b.1));
        }
        for (k, &(_, i)) in run.iter_mut().zip(&second) {
            k.1 = i;
        }
    }
    let sorted: Vec<IdEntry> = keys.into_iter().map(|(_, i)| entries[i as usize]).collect();
    entries.copy_from_slice(&sorted);
}

/// [`crate::layout::boxes`] of sorted entries.
pub fn boxes<'a>(seqs: &'a Seqs, entries: &[IdEntry], min_width: f64) -> (Vec<FrameBox<'a>>, u64) {
    struct Open {
        name: u32,
        start: u64,
        mix_at: Mix,
    }
    let total: u64 = entries.iter().map(IdEntry::total).sum();
    let widthpertime_pct = 100.0 / total as f64;
    let minwidth_time = min_width / widthpertime_pct;
    let mut out = Vec::new();
    let mut open: Vec<Open> = Vec::new();
    let mut time = 0u64;
    let mut cum: Mix = [0; 4];
    // The root box (name "") stands at depth 0, as in the text layout.
    let close = |open: &mut Vec<Open>, from: usize, out: &mut Vec<FrameBox<'a>>, time: u64, cum: &Mix| {
        for (i, o) in open.drain(from..).enumerate() {
            if time == o.start || ((time - o.start) as f64) < minwidth_time {
                continue;
            }
            let mut mix = *cum;
            for (m, a) in mix.iter_mut().zip(o.mix_at) {
                *m -= a;
            }
            let name = if o.name == u32::MAX { "" } else { seqs.name(o.name) };
            out.push(FrameBox { name, depth: from + i, start: o.start, end: time, mix, before: 0 });
        }
    };
    let mut prev: Vec<u32> = Vec::new();
    let mut cur: Vec<u32> = Vec::new();
    for (k, e) in entries.iter().enumerate() {
        // The stacks are read in the sorted order, scattered: asked for
        // ahead (where each lies, then its names).
        if let Some(a) = entries.get(k + 16) {
            seqs.prefetch_place(a.seq);
        }
        if let Some(a) = entries.get(k + 8) {
            seqs.prefetch_names(a.seq);
        }
        cur.clear();
        cur.extend(names(seqs, e));
        let shared = if k == 0 {
            open.push(Open { name: u32::MAX, start: time, mix_at: cum });
            0
        } else {
            prev.iter().zip(&cur).take_while(|(a, b)| a == b).count()
        };
        close(&mut open, shared + 1, &mut out, time, &cum);
        for &name in &cur[shared..] {
            open.push(Open { name, start: time, mix_at: cum });
        }
        std::mem::swap(&mut prev, &mut cur);
        time += e.total();
        for (c, m) in cum.iter_mut().zip(e.mix) {
            *c += m;
        }
    }
    close(&mut open, 0, &mut out, time, &cum);
    (out, time)
}
