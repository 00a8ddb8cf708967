//! Wakers (`--wakers`): the `offwake` map splits each block of the
//! `offcpu` map by who ended it. Here each (thread, state, stack) gets one
//! record per waker, with the waker's stack and, with `--wake-depth`, the
//! chain of what the waker itself waited on, and one record without a
//! waker for the rest of its time (blocks no wake-up ended: preemptions,
//! blocks still open at the stop).

use std::collections::BTreeMap;

use wallclock_capture::event::{self, WcOval, WcWkey};
use wallclock_capture::procfs;
use wallclock_stream::{State, Waker, WakerBlock};

use crate::blocks::Where;
use crate::stacks::Stacks;

/// A wake-up as BPF keyed it: context, waker tid, waker stack, the waker's
/// own last block (fingerprint, raw state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct WakeKey {
    pub ctx: u32,
    pub wtid: u32,
    pub wfp: u64,
    pub blk_fp: u64,
    pub blk_state: u32,
}

/// A block (thread, state, where) as collect aggregates it.
pub type Block = (u32, State, Where);

/// (ns, count) per waker of each block.
#[derive(Default)]
pub struct Wakes {
    pub by_block: BTreeMap<Block, BTreeMap<WakeKey, (u64, u64)>>,
}

impl Wakes {
    pub fn add(&mut self, b: Block, k: WakeKey, ns: u64, count: u64) {
        let e = self.by_block.entry(b).or_default().entry(k).or_default();
        e.0 += ns;
        e.1 += count;
    }

    /// The offwake entries: (key, value) bytes to (tid, fp, state) and the
    /// wake-up.
    pub fn parse(offwake: &[(Vec<u8>, Vec<u8>)]) -> Vec<(u32, u64, u32, WakeKey, u64, u64)> {
        offwake
            .iter()
            .filter_map(|(k, v)| {
                let (k, v) = (event::from_bytes::<WcWkey>(k)?, event::from_bytes::<WcOval>(v)?);
                let w = WakeKey { ctx: k.wctx, wtid: k.wtid, wfp: k.wfp, blk_fp: k.blk_fp, blk_state: k.blk_state };
                Some((k.tid, k.fp, k.state, w, v.ns, v.count))
            })
            .collect()
    }

    /// The records' split of a block of `ns` and `count`: the wakers'
    /// shares (scaled down if together they exceed the block: a slice
    /// that began early takes time back from the block, see close_slice)
    /// and what no wake-up ended.
    #[cfg(test)]
    pub fn split(&self, b: &Block, ns: u64, count: u64) -> (Vec<(WakeKey, u64, u64)>, u64, u64) {
        self.split_share(b, ns, count, (1, 1))
    }

    /// As [`Wakes::split`], for the part `share.0` of `share.1` of the
    /// block's time that one object of it had (a stack waited on several:
    /// the wakers are not keyed by object, and each gets that part of
    /// every waker's time).
    pub fn split_share(&self, b: &Block, ns: u64, count: u64, share: (u64, u64)) -> (Vec<(WakeKey, u64, u64)>, u64, u64) {
        let Some(ws) = self.by_block.get(b) else { return (Vec::new(), ns, count) };
        let part = |v: u64| if share.0 >= share.1 { v } else { (v as u128 * share.0 as u128 / share.1.max(1) as u128) as u64 };
        let sum: u64 = ws.values().map(|v| part(v.0)).sum();
        let mut out = Vec::new();
        let (mut left_ns, mut left_count) = (ns, count);
        for (k, &(wns, wcount)) in ws {
            let (wns, wcount) = (part(wns), part(wcount));
            let wns = if sum > ns { (wns as u128 * ns as u128 / sum.max(1) as u128) as u64 } else { wns };
            let wns = wns.min(left_ns);
            let wcount = wcount.min(left_count);
            left_ns -= wns;
            left_count -= wcount;
            out.push((*k, wns, wcount));
        }
        (out, left_ns, left_count)
    }

    /// The waker that ended the most of a block's time.
    fn top(&self, b: &Block) -> Option<WakeKey> {
        self.by_block.get(b)?.iter().max_by_key(|(_, v)| v.0).map(|(k, _)| *k)
    }
}

/// Kernel functions of timer expiry: an interrupt's wake-up through them
/// is the timer's (a sleep's end), not a device's.
const TIMER_FUNCS: [&str; 9] = [
    "hrtimer_wakeup",
    "__hrtimer_run_queues",
    "hrtimer_interrupt",
    "hrtimer_run_softirq",
    "call_timer_fn",
    "__run_timers",
    "run_timer_softirq",
    "process_timeout",
    "tick_sched_timer",
];

fn timer_ranges() -> &'static [(u64, u64)] {
    static R: std::sync::OnceLock<Vec<(u64, u64)>> = std::sync::OnceLock::new();
    R.get_or_init(|| procfs::ranges_of(&TIMER_FUNCS))
}

fn within(r: &[(u64, u64)], a: u64) -> bool {
    let i = r.partition_point(|&(lo, _)| lo <= a);
    i > 0 && a < r[i - 1].1
}

fn in_timer(kstack: &[u64]) -> bool {
    kstack.iter().any(|&a| within(timer_ranges(), a))
}

/// An interrupt's kernel stack from its entry (`asm_*`) to the wake-up,
/// root first: what lies below the entry is the code it interrupted.
fn interrupt_part(kstack: &[u64]) -> Vec<u64> {
    static R: std::sync::OnceLock<Vec<(u64, u64)>> = std::sync::OnceLock::new();
    let entry = R.get_or_init(|| procfs::ranges_of(&["asm_*"]));
    match kstack.iter().rposition(|&a| within(entry, a)) {
        Some(i) => kstack[i..].to_vec(),
        None => kstack.to_vec(),
    }
}

/// What the records are built from.
pub struct Ctx<'a> {
    pub stacks: &'a Stacks,
    pub wakes: &'a Wakes,
    /// A block's (state, where) from its fingerprint and raw state, as
    /// collect maps them.
    pub block_of: &'a dyn Fn(u32, u64, u32) -> Option<(State, Where)>,
    /// A thread's pid and name, when the capture knows the thread.
    pub thread: &'a dyn Fn(u32) -> Option<(u32, String)>,
}

/// The stream's waker of `k`, following its chain `depth - 1` more hops.
pub fn waker(cx: &Ctx, k: &WakeKey, depth: u32) -> Waker {
    let stack = cx.stacks.get(k.wfp);
    let (u, kst) = stack.map_or((Vec::new(), Vec::new()), |(u, kst)| (u.to_vec(), kst.to_vec()));
    let mut w = match k.ctx {
        event::WCTX_THREAD => {
            let (pid, comm) = match (cx.stacks.waker(k.wfp), (cx.thread)(k.wtid)) {
                (_, Some((pid, comm))) => (pid, comm),
                (Some((pid, _, comm)), None) => (*pid, comm.clone()),
                (None, None) => (procfs::tgid_of(k.wtid).unwrap_or(0), String::new()),
            };
            let mut w = Waker::new("thread", pid, k.wtid, &comm);
            w.ustack = u;
            w.kstack = kst.clone();
            w
        }
        ctx => {
            let name = if in_timer(&kst) {
                "timer"
            } else {
                match ctx {
                    event::WCTX_HARDIRQ => "irq",
                    event::WCTX_SOFTIRQ => "softirq",
                    _ => "nmi",
                }
            };
            let mut w = Waker::new(name, 0, 0, "");
            w.kstack = interrupt_part(&kst);
            w
        }
    };
    if depth > 1 && k.ctx == event::WCTX_THREAD && k.blk_fp != 0 {
        if let Some((state, wh)) = (cx.block_of)(k.wtid, k.blk_fp, k.blk_state) {
            let mut b = WakerBlock { state, ustack: Vec::new(), kstack: Vec::new(), frames: Vec::new(), waker: None };
            match &wh {
                Where::Stack(u, kst) => {
                    b.ustack = u.to_vec();
                    b.kstack = kst.to_vec();
                }
                Where::Synthetic(name) => b.frames = vec![wallclock_stream::Frame::named(*name)],
            }
            if depth > 2 {
                if let Some(next) = cx.wakes.top(&(k.wtid, state, wh)) {
                    b.waker = Some(Box::new(waker(cx, &next, depth - 1)));
                }
            }
            w.blocked = Some(Box::new(b));
        }
    }
    w
}

/// The distance from a CPU's `runqueues` to its `__preempt_count` (x86
/// per-CPU variables), from the kernel's BTF: how the BPF side tells an
/// interrupt's wake-up from a thread's (see bpf/waker.bpf.h). None (every
/// waker a thread) where either is missing.
pub fn preempt_from_rq() -> Option<i64> {
    use libbpf_rs::btf::{types::DataSec, Btf, BtfType};
    let btf = Btf::from_vmlinux().ok()?;
    let sec: DataSec = btf.type_by_name(".data..percpu")?;
    let (mut rq, mut pc) = (None, None);
    for v in sec.iter() {
        let t: BtfType = btf.type_by_id(v.ty)?;
        match t.name().and_then(|n| n.to_str()) {
            Some("runqueues") => rq = Some(v.offset as i64),
            Some("__preempt_count") => pc = Some(v.offset as i64),
            _ => {}
        }
    }
    let d = pc? - rq?;
    (d != 0).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(wtid: u32) -> WakeKey {
        WakeKey { ctx: event::WCTX_THREAD, wtid, wfp: 100 + wtid as u64, blk_fp: 0, blk_state: 0 }
    }

    #[test]
    fn split_keeps_the_block_time() {
        let b: Block = (1, State::S, Where::Synthetic("x"));
        let mut w = Wakes::default();
        w.add(b.clone(), key(2), 600, 3);
        w.add(b.clone(), key(3), 200, 1);
        // Woken blocks are part of the block; the rest has no waker.
        let (parts, ns, count) = w.split(&b, 1000, 5);
        assert_eq!(parts, vec![(key(2), 600, 3), (key(3), 200, 1)]);
        assert_eq!((ns, count), (200, 1));
        // A block shortened after its wake-up was counted (a slice that
        // began early): the wakers' shares shrink with it, nothing exceeds it.
        let (parts, ns, _) = w.split(&b, 400, 4);
        assert_eq!(parts.iter().map(|p| p.1).sum::<u64>() + ns, 400);
        assert_eq!((parts[0].1, parts[1].1), (300, 100));
        // A block nobody woke is whole.
        let other: Block = (9, State::D, Where::Synthetic("y"));
        assert_eq!(w.split(&other, 50, 2), (Vec::new(), 50, 2));
    }
}
