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
            tid: k.tid,
            comm: k.comm,
            scale: k.scale,
        })
    }
}

/// Distinct [`Named`] keys and their sums, in the order first seen.
#[derive(Default)]
pub(crate) struct NamedAgg {
    pub items: Vec<(Named, Agg)>,
    slots: FastMap<Named, u32>,
}

impl NamedAgg {
    /// Add `v` under `key`; the slot it is summed in.
    pub fn add(&mut self, key: Named, v: Agg) -> u32 {
        let items = &mut self.items;
        let slot = *self.slots.entry(key).or_insert_with(|| {
            items.push((key, Agg::default()));
            (items.len() - 1) as u32
        });
        items[slot as usize].1.add(v);
        slot
    }

    /// The sums, with no more lookups to come.
    pub fn into_items(self) -> Vec<(Named, Agg)> {
        self.items
    }
}
