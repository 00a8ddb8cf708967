//! The bulk of a symbolized stream: stacks with frames and nothing else to
//! tell them by (no addresses kept, no GPU detail, no waker), aggregated
//! on a small key, each distinct one in a vector slot.
//!
//! Each input stack id remembers the slot its last record went to
//! ([`crate::intern::InputStack`]): records of one stack mostly come from
//! one thread in one state, so most records are summed after the one
//! lookup of their stack id, without hashing a key (a hash map entry per
//! record was a sixth of stackmerge's time on 1M records).

use wallclock_stream::fasthash::FastMap;
use wallclock_stream::{Kind, State};

use crate::key::{Agg, Key};

/// What [`Key::of`] makes of a stack with frames only, in 32 bytes
/// instead of 120.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Named {
    pub frames: u32,
    pub kind: Kind,
    pub state: Option<State>,
    pub pid: u32,
    /// The process's generation under its pid (`Stack::pgen`, 0 absent).
    pub pgen: u32,
    pub tid: u32,
    /// The thread name, as an id of [`crate::key::Comms`].
    pub comm: u32,
    pub scale: Option<u64>,
}

impl Named {
    /// The key of a [`Key`] that has frames and nothing else beside its
    /// thread: the same stack as a record of a symbolized stream.
    pub fn of(k: &Key) -> Option<Named> {
        let frames = k.frames?;
        (k.addrs.is_empty() && k.gpu.is_none() && k.waker.is_none()).then_some(Named {
            frames,
            kind: k.kind,
            state: k.state,
            pid: k.pid,
            pgen: k.pgen,
            tid: k.tid,
            comm: k.comm,
            scale: k.scale,
        })
    }
}

/// Distinct [`Named`] keys and their sums, in the order first seen,
/// found by their frames: the merger's table ids are dense, so a vector
/// indexed by them finds the few keys of one stack of frames (one per
/// thread and state it came in) with one read, where a hash map of 200k
/// keys took two or three scattered ones per new key.
#[derive(Default)]
pub(crate) struct NamedAgg {
    pub items: Vec<(Named, Agg)>,
    /// Table stack id -> (its newest key's slot + 1, or 0; how many of
    /// its keys are chained).
    by_frames: Vec<(u32, u32)>,
    /// Slot -> the slot of the key chained before it + 1, or 0.
    before: Vec<u32>,
    /// Keys past the first [`CHAIN`] of their frames (a stack that many
    /// threads share): a walk of a chain stays short.
    more: FastMap<Named, u32>,
}

/// Keys of one stack of frames found by a walk, the others by hash.
const CHAIN: u32 = 8;

impl NamedAgg {
    /// Add `v` under `key`; the slot it is summed in.
    pub fn add(&mut self, key: Named, v: Agg) -> u32 {
        let f = key.frames as usize;
        if f >= self.by_frames.len() {
            self.by_frames.resize(f + 1, (0, 0));
        }
        let (head, chained) = self.by_frames[f];
        let mut at = head;
        while at != 0 {
            let slot = at - 1;
            if self.items[slot as usize].0 == key {
                self.items[slot as usize].1.add(v);
                return slot;
            }
            at = self.before[slot as usize];
        }
        if chained >= CHAIN {
            if let Some(&slot) = self.more.get(&key) {
                self.items[slot as usize].1.add(v);
                return slot;
            }
        }
        let slot = self.items.len() as u32;
        self.items.push((key, v));
        if chained < CHAIN {
            self.before.push(head);
            self.by_frames[f] = (slot + 1, chained + 1);
        } else {
            self.before.push(0);
            self.more.insert(key, slot);
        }
        slot
    }

    /// The sums, with no more lookups to come.
    pub fn into_items(self) -> Vec<(Named, Agg)> {
        self.items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_one_stack_found_past_the_chain() {
        let mut a = NamedAgg::default();
        let key = |tid: u32, frames: u32| Named { frames, kind: Kind::On, state: None, pid: 1, pgen: 0, tid, comm: 0, scale: None };
        let one = |ns| Agg { ns, count: 1, launch_delay_ns: None };
        for round in 0..2 {
            for tid in 0..3 * CHAIN {
                assert_eq!(a.add(key(tid, 5), one(tid as u64)), tid, "round {round}");
            }
        }
        assert_eq!(a.add(key(0, 2), one(7)), 3 * CHAIN);
        let items = a.into_items();
        assert_eq!(items.len() as u32, 3 * CHAIN + 1);
        assert!(items.iter().take(3 * CHAIN as usize).enumerate().all(|(t, (k, v))| k.tid == t as u32 && v.ns == 2 * t as u64 && v.count == 2));
    }
}
