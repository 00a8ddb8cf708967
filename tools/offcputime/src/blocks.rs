//! A block's place and the sums of blocks: what `collect` (at the stop),
//! `early` (threads written out during the capture), `timeline` and
//! `wakers` (each block split by who ended it) key the BPF side's blocks
//! by.

use std::collections::BTreeMap;

use wallclock_stream::State;

use wallclock_capture::objects::Obj;
use crate::stacks::Addrs;

/// Where a block's time goes: its stacks (user, kernel), or a synthetic
/// stack that says why it has none (`collect::LOST`...).
#[derive(PartialEq, Eq, PartialOrd, Ord, Clone, Debug)]
pub(crate) enum Where {
    Stack(Addrs, Addrs),
    Synthetic(&'static str),
}

/// Blocks summed by thread, state, place and object, and the synthetic
/// stacks' (blocks, ns) for the trailer.
#[derive(Default)]
pub(crate) struct Acc {
    /// (tid, state, where, what it waited on) -> (ns, count)
    pub stacks: BTreeMap<(u32, State, Where, Obj), (u64, u64)>,
    /// Blocks and ns per synthetic stack.
    pub synthetic: BTreeMap<&'static str, (u64, u64)>,
}

impl Acc {
    pub fn add(&mut self, tid: u32, s: State, w: Where, ns: u64, count: u64) {
        self.add_obj(tid, s, w, Obj::default(), ns, count)
    }

    pub fn add_obj(&mut self, tid: u32, s: State, w: Where, o: Obj, ns: u64, count: u64) {
        if let Where::Synthetic(name) = w {
            let e = self.synthetic.entry(name).or_default();
            e.0 += count;
            e.1 += ns;
        }
        // A synthetic stack has no object (only a thread blocked since
        // the start has one without a stack of its own: see `collect::Resolve::init_obj`).
        let o = if matches!(w, Where::Synthetic(_)) { Obj::default() } else { o };
        let e = self.stacks.entry((tid, s, w, o)).or_default();
        e.0 += ns;
        e.1 += count;
    }
}
