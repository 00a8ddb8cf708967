//! The merged view, and the order it is written in: stacks sorted by
//! kind, state, process, thread, thread name, addresses, then frames (in
//! the order of the frames themselves, not of their ids).
//!
//! The bulk ([`Named`] entries, 200k of them after 1M records) is sorted
//! on a precomputed 20-byte key: building the whole tuple of [`order`]
//! for both sides of each comparison (with two rank lookups) was a sixth
//! of stackmerge's time after its input ended.

use std::collections::BTreeMap;

use wallclock_stream::{Header, Kind, Maps, Stack, StackTable, State, Stats, Thread};

use crate::intern::ranks;
use crate::key::{order, Agg, Comms, Key};
use crate::named::Named;

/// The merged view.
pub struct Merged {
    pub header: Header,
    pub threads: BTreeMap<(u32, u32), Thread>,
    pub maps: Vec<Maps>,
    /// Aggregated, in ns, sorted; off-CPU leaf appended where frames exist.
    pub(crate) items: Vec<Item>,
    pub stats: Stats,
    pub table: StackTable,
    pub(crate) comms: Comms,
}

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
    /// The frames' rank (a [`Named`] entry's; 0 for a key's).
    rank: u32,
    src: u32,
}

fn hi(kind: Kind, state: Option<State>, pid: u32, tid: u32, comm_rank: u32) -> u128 {
    // Option<State>: None first, then the states in their order.
    let state = state.map_or(0, |s| 1 + s as u128);
    (kind as u128) << 112 | state << 96 | u128::from(pid) << 64 | u128::from(tid) << 32 | u128::from(comm_rank)
}

/// The entries in their order, neighbours with equal keys summed (a stack
/// that came both as samples and as time, or at two frequencies, has one
/// key once its samples are ns). Every key must have its `scale` taken.
pub(crate) fn sorted(named: Vec<(Named, Agg)>, keys: Vec<(Key, Agg)>, table: &StackTable, comms: &Comms) -> Vec<Item> {
    let rank = ranks(table, named.iter().map(|(n, _)| n.frames).chain(keys.iter().filter_map(|(k, _)| k.frames)));
    let comm_rank = comms.ranks();
    let mut es: Vec<Entry> = Vec::with_capacity(named.len() + keys.len());
    for (i, (n, _)) in named.iter().enumerate() {
        let hi = hi(n.kind, n.state, n.pid, n.tid, comm_rank[n.comm as usize]);
        es.push(Entry { hi, rank: rank[n.frames as usize], src: i as u32 });
    }
    for (i, (k, _)) in keys.iter().enumerate() {
        let hi = hi(k.kind, k.state, k.pid, k.tid, comm_rank[k.comm as usize]);
        es.push(Entry { hi, rank: 0, src: KEY | i as u32 });
    }
    let none: &[u64] = &[];
    let full = |e: &Entry| match e.src & KEY {
        0 => {
            let n = &named[e.src as usize].0;
            let c = comm_rank[n.comm as usize];
            (n.kind, n.state, n.pid, n.tid, c, none, none, Some(rank[n.frames as usize]), None, n.scale)
        }
        _ => order(&keys[(e.src & !KEY) as usize].0, &rank, &comm_rank),
    };
    es.sort_unstable_by(|a, b| {
        a.hi.cmp(&b.hi).then_with(|| match (a.src & KEY, b.src & KEY) {
            // Equal frames have equal ranks: two named entries are the same
            // when their ranks are.
            (0, 0) => a.rank.cmp(&b.rank),
            _ => full(a).cmp(&full(b)),
        })
    });
    let mut summed: Vec<(u32, Agg)> = Vec::with_capacity(es.len());
    for e in es {
        let v = match e.src & KEY {
            0 => named[e.src as usize].1,
            _ => keys[(e.src & !KEY) as usize].1,
        };
        let same = |a: u32| match (a & KEY, e.src & KEY) {
            (0, 0) => named[a as usize].0 == named[e.src as usize].0,
            (KEY, KEY) => keys[(a & !KEY) as usize].0 == keys[(e.src & !KEY) as usize].0,
            _ => false,
        };
        match summed.last_mut() {
            Some((last, into)) if same(*last) => into.add(v),
            _ => summed.push((e.src, v)),
        }
    }
    let mut keys: Vec<Option<Key>> = keys.into_iter().map(|(k, _)| Some(k)).collect();
    summed
        .into_iter()
        .map(|(src, v)| match src & KEY {
            0 => Item::Named(named[src as usize].0, v),
            _ => {
                let k = keys[(src & !KEY) as usize].take().expect("each key once");
                Item::Full(Box::new(k.into_stack(v, comms)))
            }
        })
        .collect()
}
