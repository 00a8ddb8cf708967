//! Who woke the blocks (`offcputime --wakers`, stream 1.3): per off-CPU
//! stack its top wakers, and over all threads who waits on whom.

use std::collections::BTreeMap;

use serde::Serialize;
use wallclock_stream::{Frame, Kind, Stack, Waker};

use crate::frames;

#[derive(Debug, Clone, Serialize)]
pub struct TopWaker {
    /// `comm (TID)`, or `[timer]`, `[irq]`, `[softirq]`.
    pub who: String,
    /// 0 for an interrupt.
    pub tid: u32,
    /// The waker's own function (its innermost user frame), else the
    /// kernel function that woke (a timer's `hrtimer_wakeup`).
    pub func: String,
    pub ns: u64,
    pub count: u64,
}

/// One line of the waits-on table: a thread's blocked time that another
/// thread (or an interrupt) ended.
#[derive(Debug, Clone, Serialize)]
pub struct WaitsOn {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub waker: String,
    pub waker_tid: u32,
    pub ns: u64,
    pub count: u64,
}

/// The kernel's wake-up machinery, above the function that woke.
const WAKE_PATH: [&str; 12] = [
    "try_to_wake_up",
    "wake_up_process",
    "wake_up_q",
    "__wake_up_common",
    "__wake_up",
    "__wake_up_sync_key",
    "autoremove_wake_function",
    "default_wake_function",
    "wake_page_function",
    "wake_bit_function",
    "complete",
    "pollwake",
];

/// The function a waker woke from.
pub fn waker_func(w: &Waker) -> String {
    let f: &[Frame] = &w.frames;
    if let Some(i) = frames::user_frame(f) {
        return frames::show(&f[i]);
    }
    f.iter()
        .rev()
        .find(|x| !WAKE_PATH.contains(&x.func.as_str()) && !x.func.starts_with("bpf_") && !x.func.starts_with("__bpf"))
        .map_or_else(|| "?".to_string(), frames::show)
}

/// The `n` heaviest wakers of `ss`, (who, function) summed.
pub fn top(ss: &[&Stack], n: usize) -> Vec<TopWaker> {
    let mut by: BTreeMap<(String, u32, String), (u64, u64)> = BTreeMap::new();
    for s in ss {
        if let Some(w) = &s.waker {
            let e = by.entry((w.who(), w.tid, waker_func(w))).or_default();
            e.0 += s.ns;
            e.1 += s.count;
        }
    }
    let mut v: Vec<TopWaker> =
        by.into_iter().map(|((who, tid, func), (ns, count))| TopWaker { who, tid, func, ns, count }).collect();
    v.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.who.cmp(&b.who)));
    v.truncate(n);
    v
}

/// Who waits on whom, heaviest first, at most `n` pairs.
pub fn waits_on(stacks: &[&Stack], comms: &BTreeMap<(u32, u32), String>, n: usize) -> Vec<WaitsOn> {
    let mut by: BTreeMap<(u32, u32, String, u32), (u64, u64)> = BTreeMap::new();
    for s in stacks.iter().filter(|s| s.kind == Kind::Off) {
        if let Some(w) = &s.waker {
            let e = by.entry((s.pid, s.tid, w.who(), w.tid)).or_default();
            e.0 += s.ns;
            e.1 += s.count;
        }
    }
    let mut v: Vec<WaitsOn> = by
        .into_iter()
        .map(|((pid, tid, waker, waker_tid), (ns, count))| WaitsOn {
            pid,
            tid,
            comm: comms.get(&(pid, tid)).cloned().unwrap_or_default(),
            waker,
            waker_tid,
            ns,
            count,
        })
        .collect();
    v.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| (a.tid, &a.waker).cmp(&(b.tid, &b.waker))));
    v.truncate(n);
    v
}
