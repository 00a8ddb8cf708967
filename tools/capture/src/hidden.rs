//! Threads the kernel keeps from BPF. On some kernels (a sandbox's, whose
//! agent hides itself) a few processes are never visited by the task
//! iterator and most of their context switches never reach sched_switch
//! programs: what BPF says of them is a handful of switches, not their
//! time. System-wide, every thread listed in /proc just after the start
//! that the iterator did not visit is such a thread: it is accounted from
//! /proc instead, its on-CPU time from its own CPU clock (schedstat at the
//! start and at the stop), the rest of the window off-CPU under
//! `[hidden from BPF]`, and counted (`hidden_threads`), so that every
//! process alive in the window appears and nothing is dropped silently.

use std::collections::{BTreeMap, HashSet};

use crate::event::WcThread;
use crate::procfs;
use crate::steal::{self, ExecClock};

/// The synthetic frame of a hidden thread's off-CPU time.
pub const FRAME: &str = "[hidden from BPF]";

/// A thread as /proc listed it just after the iterator ran.
#[derive(Debug, Clone)]
pub struct Listed {
    pub pid: u32,
    pub comm: String,
    pub at_start: Option<ExecClock>,
}

/// Every thread in /proc now, with its CPU clock.
pub fn list_all() -> BTreeMap<u32, Listed> {
    let mut out = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir("/proc") else { return out };
    for pid in rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
        for tid in procfs::threads(pid) {
            let comm = procfs::comm(pid, tid).unwrap_or_default();
            out.insert(tid, Listed { pid, comm, at_start: steal::read(pid, tid) });
        }
    }
    out
}

/// A hidden thread's window: on-CPU from its clock, the rest off-CPU.
#[derive(Debug, Clone)]
pub struct Hidden {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub on_ns: u64,
    pub off_ns: u64,
}

/// The listed threads BPF did not see as they are: no entry, or an entry
/// made by a stray switch of a thread alive at the start that the
/// iterator never visited. Those still alive at the stop (the window is
/// theirs whole), with `threads` the thread map at the stop.
pub fn find(listed: &BTreeMap<u32, Listed>, threads: &[(u32, WcThread)], start: u64, end: u64) -> Vec<Hidden> {
    let visible: HashSet<u32> =
        threads.iter().filter(|(_, t)| t.snapped != 0 || t.begin_ns > start).map(|(tid, _)| *tid).collect();
    let window = end.saturating_sub(start);
    let mut out = Vec::new();
    for (&tid, l) in listed {
        if visible.contains(&tid) {
            continue;
        }
        let Some(stop) = steal::read(l.pid, tid) else { continue }; // gone: not alive all window
        let ran = l.at_start.map_or(0, |s| stop.exec_ns.saturating_sub(s.exec_ns));
        let on_ns = ran.min(window);
        let comm = procfs::comm(l.pid, tid).unwrap_or_else(|| l.comm.clone());
        out.push(Hidden { pid: l.pid, tid, comm, on_ns, off_ns: window - on_ns });
    }
    out
}
