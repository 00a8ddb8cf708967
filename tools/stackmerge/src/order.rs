//! The merged view, and the order it is written in: stacks sorted by
//! kind, state, process, thread, thread name, addresses, then frames (in
//! the order of the frames themselves, not of their ids).
//!
//! The bulk ([`Named`] entries, 200k of them after 1M records) is sorted
//! on precomputed packed keys: building the whole tuple of a key's fields
//! for both sides of each comparison (with two rank lookups) was a sixth
//! of stackmerge's time after its input ended.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use wallclock_stream::fasthash::FastMap;
use wallclock_stream::table::prefetch;
use wallclock_stream::{Header, Kind, Maps, Stack, StackTable, State, Stats, Thread};

use crate::key::{Agg, Comms, Key};
use crate::named::Named;

/// The merged view.
pub struct Merged {
    pub header: Header,
    pub threads: BTreeMap<crate::merge::ThreadKey, Thread>,
    pub maps: Vec<Maps>,
    /// Aggregated, in ns, sorted; off-CPU leaf appended where frames exist.
    pub(crate) items: Vec<Item>,
    pub stats: Stats,
    pub table: StackTable,
    pub(crate) comms: Comms,
    /// The named entries' unnamed frames, counted (see
    /// [`crate::symbolize`]).
    pub(crate) unnamed: Unnamed,
    /// The capture's own name (`lock 0x7f..`) of each named entry's lock
    /// that [`crate::locks`] named by its call site, by (pid, pgen, table
    /// stack): written as the record's `object`.
    pub(crate) lock_objects: FastMap<(u32, u32, u32), String>,
}

/// Per module with unnamed frames: the time and events of the stacks with
/// one (a stack once per module).
pub(crate) type Unnamed = BTreeMap<String, (u64, u64)>;

/// One merged stack: most often one of frames only, kept as its small key
/// (no record made of it until it is written), else the record itself.
pub(crate) enum Item {
    Named(Named, Agg),
    Full(Box<Stack>),
}

impl Merged {
    /// How many stacks the merge holds.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Merged stack `i` as a record (its frames are table stack `stack_id`).
    pub fn stack(&self, i: usize) -> std::borrow::Cow<'_, Stack> {
        match &self.items[i] {
            Item::Named(n, v) => std::borrow::Cow::Owned(named_stack(n, v, &self.comms)),
            Item::Full(s) => std::borrow::Cow::Borrowed(s),
        }
    }
}

/// The record of a [`Named`] entry.
pub(crate) fn named_stack(n: &Named, v: &Agg, comms: &Comms) -> Stack {
    let mut s = Stack::new(n.kind, n.pid, n.tid, comms.name(n.comm));
    s.state = n.state;
    s.pgen = (n.pgen > 0).then_some(n.pgen);
    s.stack_id = Some(n.frames);
    s.ns = v.ns;
    s.count = v.count;
    s
}

/// Marks an index of `keys` (else of `named`) in [`Entry::src`].
const KEY: u32 = 1 << 31;

/// What the sort compares first, then the entry it stands for.
struct Entry {
    /// Kind, state, pid, tid and the thread name's rank, packed in their
    /// order of comparison.
    hi: u128,
    /// The first frames' ranks (see [`FrameOrder::prefix`]); 0 for a key.
    pre: u128,
    src: u32,
    /// The stack of frames (a named entry's).
    frames: u32,
}

fn hi(kind: Kind, state: Option<State>, pid: u32, pgen: u32, tid: u32, comm_rank: u32) -> u128 {
    // Option<State>: None first, then the states in their order (4 bits);
    // a process's generation under its pid above them (12 bits: a pid
    // used 4,096 times in one capture sorts among the first ones).
    let state = state.map_or(0, |s| 1 + s as u128);
    let pgen = u128::from(pgen.min(0xfff));
    (kind as u128) << 112 | pgen << 100 | state << 96 | u128::from(pid) << 64 | u128::from(tid) << 32 | u128::from(comm_rank)
}

/// Stacks in the order of their frames (lexicographic, as `Vec<Frame>`
/// compares: a stack that is a prefix of another first).
struct FrameOrder<'t> {
    table: &'t StackTable,
    /// Each frame's place among the frames, from 1.
    rank: Vec<u32>,
    /// Bits of a rank in a prefix, and how many ranks a prefix holds.
    bits: u32,
    per: usize,
}

impl<'t> FrameOrder<'t> {
    fn new(table: &'t StackTable) -> Self {
        let mut frames: Vec<u32> = (0..table.frame_count() as u32).collect();
        frames.sort_unstable_by(|a, b| table.frame(*a).cmp(table.frame(*b)));
        let mut rank = vec![0u32; frames.len()];
        for (i, f) in frames.into_iter().enumerate() {
            rank[f as usize] = i as u32 + 1;
        }
        let bits = (u32::BITS - (rank.len() as u32).leading_zeros()).max(1);
        FrameOrder { table, rank, bits, per: (128 / bits) as usize }
    }

    /// The ranks of the first frames of stack `id`, 0 past its end, side
    /// by side: prefixes compare as the stacks do, up to their length.
    fn prefix(&self, id: u32) -> u128 {
        self.prefix_from(id, 0)
    }

    /// The same of the frames from `start` on.
    fn prefix_from(&self, id: u32, start: usize) -> u128 {
        let s = self.table.stack(id);
        let mut p = 0u128;
        for i in start..start + self.per {
            p = p << self.bits | u128::from(s.get(i).map_or(0, |&f| self.rank[f as usize]));
        }
        p
    }

    fn cmp(&self, a: u32, b: u32) -> Ordering {
        if a == b {
            return Ordering::Equal;
        }
        let ranks = |id: u32| self.table.stack(id).iter().map(|&f| self.rank[f as usize]);
        ranks(a).cmp(ranks(b))
    }
}

/// The entries in their order, neighbours with equal keys summed (a stack
/// that came both as samples and as time, or at two frequencies, has one
/// key once its samples are ns). Every key must have its `scale` taken.
///
/// Named entries compare on their packed thread and the ranks of their
/// first frames, the rest of their frames only when those are equal: the
/// old sort of all stacks by their frames, then of the entries by the
/// stacks' places, read 200k stacks' frames scattered in memory a dozen
/// times each (a third of the time after the input ended).
pub(crate) fn sorted(named: Vec<(Named, Agg)>, keys: Vec<(Key, Agg)>, table: &StackTable, comms: &Comms) -> Vec<Item> {
    let fo = FrameOrder::new(table);
    let comm_rank = comms.ranks();
    let mut es: Vec<Entry> = Vec::with_capacity(named.len() + keys.len());
    for (i, (n, _)) in named.iter().enumerate() {
        let hi = hi(n.kind, n.state, n.pid, n.pgen, n.tid, comm_rank[n.comm as usize]);
        es.push(Entry { hi, pre: fo.prefix(n.frames), src: i as u32, frames: n.frames });
    }
    let mut kes: Vec<Entry> = Vec::with_capacity(keys.len());
    for (i, (k, _)) in keys.iter().enumerate() {
        let hi = hi(k.kind, k.state, k.pid, k.pgen, k.tid, comm_rank[k.comm as usize]);
        kes.push(Entry { hi, pre: 0, src: KEY | i as u32, frames: 0 });
    }
    let none: &[u64] = &[];
    // Key's fields in their order (the addresses as user then kernel
    // stack); a named entry has no addresses, GPU detail or waker.
    let view = |e: &Entry| match e.src & KEY {
        0 => (none, none, Some(e.frames), None, named[e.src as usize].0.scale),
        _ => {
            let k = &keys[(e.src & !KEY) as usize].0;
            (k.ustack(), k.kstack(), k.frames, k.gpu.as_deref(), k.scale)
        }
    };
    let waker = |e: &Entry| match e.src & KEY {
        0 => None,
        _ => keys[(e.src & !KEY) as usize].0.waker.as_deref(),
    };
    let full = |a: &Entry, b: &Entry| {
        let (a, b) = (view(a), view(b));
        (a.0, a.1).cmp(&(b.0, b.1))
            .then_with(|| match (a.2, b.2) {
                (Some(x), Some(y)) => fo.cmp(x, y),
                (x, y) => x.cmp(&y),
            })
            .then_with(|| (a.3, a.4).cmp(&(b.3, b.4)))
    };
    // Records that differ only in their waker (--wakers) in the wakers'
    // order: any other order of them was the hash map's.
    let full = |a: &Entry, b: &Entry| full(a, b).then_with(|| waker(a).cmp(&waker(b)));
    let cmp = |a: &Entry, b: &Entry| {
        a.hi.cmp(&b.hi).then_with(|| match (a.src & KEY, b.src & KEY) {
            (0, 0) => a.pre.cmp(&b.pre).then_with(|| fo.cmp(a.frames, b.frames)),
            _ => full(a, b),
        })
    };
    sort_named(&mut es, &fo);
    // The keys (few: records with addresses, GPU detail or wakers) by
    // everything, merged in.
    if !kes.is_empty() {
        kes.sort_unstable_by(cmp);
        let mut all = Vec::with_capacity(es.len() + kes.len());
        let (mut ns, mut ks) = (es.into_iter().peekable(), kes.into_iter().peekable());
        while let (Some(n), Some(k)) = (ns.peek(), ks.peek()) {
            let next = if cmp(k, n) == Ordering::Less { ks.next() } else { ns.next() };
            all.extend(next);
        }
        all.extend(ns.chain(ks));
        es = all;
    }
    summed(&es, &named, keys, comms)
}

/// The named entries on their thread and first prefix alone, then each
/// run of equal ones on the next 10 frames, then on all: a tie broken
/// inside the sort read two scattered stacks per comparison, and a fifth
/// of neighbouring stacks share their first 10 frames.
fn sort_named(es: &mut [Entry], fo: &FrameOrder) {
    es.sort_unstable_by_key(|e| (e.hi, e.pre));
    let mut second: Vec<(u128, u32, u32)> = Vec::new();
    for run in es.chunk_by_mut(|a, b| (a.hi, a.pre) == (b.hi, b.pre)).filter(|r| r.len() > 1) {
        second.clear();
        second.extend(run.iter().map(|e| (fo.prefix_from(e.frames, fo.per), e.src, e.frames)));
        second.sort_unstable_by_key(|k| k.0);
        for tie in second.chunk_by_mut(|a, b| a.0 == b.0).filter(|r| r.len() > 1) {
            tie.sort_unstable_by(|a, b| fo.cmp(a.2, b.2));
        }
        for (e, &(_, src, frames)) in run.iter_mut().zip(&second) {
            (e.src, e.frames) = (src, frames);
        }
    }
}

/// One pass in the sorted order, each named entry read once: neighbours
/// with equal keys summed into one item.
fn summed(es: &[Entry], named: &[(Named, Agg)], keys: Vec<(Key, Agg)>, comms: &Comms) -> Vec<Item> {
    let mut out: Vec<Item> = Vec::with_capacity(es.len());
    let (keys, key_sums): (Vec<Key>, Vec<Agg>) = keys.into_iter().unzip();
    let mut keys: Vec<Option<Key>> = keys.into_iter().map(Some).collect();
    // A run of equal keys, summed, not yet made a record.
    let mut run: Option<(usize, Agg)> = None;
    let end_run = |run: &mut Option<(usize, Agg)>, out: &mut Vec<Item>, keys: &mut [Option<Key>]| {
        if let Some((i, v)) = run.take() {
            let k = keys[i].take().expect("each key once");
            out.push(Item::Full(Box::new(k.into_stack(v, comms))));
        }
    };
    for (i, e) in es.iter().enumerate() {
        // The entries are read in the sorted order, scattered: asked for
        // a few ahead.
        if let Some(ahead) = es.get(i + 8).filter(|a| a.src & KEY == 0) {
            prefetch(&named[ahead.src as usize]);
        }
        if e.src & KEY == 0 {
            end_run(&mut run, &mut out, &mut keys);
            let (n, v) = named[e.src as usize];
            match out.last_mut() {
                Some(Item::Named(m, into)) if *m == n => into.add(v),
                _ => out.push(Item::Named(n, v)),
            }
            continue;
        }
        let i = (e.src & !KEY) as usize;
        match &mut run {
            Some((j, into)) if keys[*j] == keys[i] => into.add(key_sums[i]),
            _ => {
                end_run(&mut run, &mut out, &mut keys);
                run = Some((i, key_sums[i]));
            }
        }
    }
    end_run(&mut run, &mut out, &mut keys);
    out
}
