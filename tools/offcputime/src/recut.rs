//! Stacks unwound before a runtime reader could read their process,
//! copied again once it can.
//!
//! A fingerprint's stack is copied and unwound once (BPF's `seen` map),
//! at the first block there. A JVM's stacks met before the HotSpot
//! reader has read its tables (libjvm.so still loading, or the tables
//! tried a second ago; read again a second later) are walked by the
//! interpreter's frame pointers, each Java frame `Interpreter`, or cut at
//! the first compiled frame; unwound once, they stayed so for the whole
//! capture: a launched JVM's sleep loop and monitor waits, which begin in
//! its first second, kept their time under no Java method (2.9% of a lock
//! thread's waits named, in one run of tests/runtime_jvm.rs). So the
//! fingerprints of the stacks with frames no reader read (cut short, or
//! in code outside every file: `Unwind::unread_frames`) are kept per
//! process with the readers' epoch for it (`Runtimes::epoch`, which grows
//! as a reader learns the process); once it has grown they are stale:
//! taken out of `seen` (the next block there copies the stack again) and
//! unwound anew from that copy, their time so far going under the new
//! stack with the rest.

use std::collections::{HashMap, HashSet};

/// At most this many fingerprints are kept (8 bytes each): a
/// system-wide capture has stacks with unread frames in processes no
/// reader will ever read; past it the pids that have exited are dropped,
/// then new ones are not kept.
const MOST: usize = 16384;

#[derive(Default)]
pub struct Recut {
    /// pid -> the readers' epoch when its stacks were unwound, and the
    /// fingerprints of those with unread frames.
    unread: HashMap<u32, (u32, Vec<u64>)>,
    kept: usize,
    /// The last look for exited pids (at most one a second).
    last_drop: Option<std::time::Instant>,
    /// Fingerprints to unwind again at their next copy.
    stale: HashSet<u64>,
}

impl Recut {
    /// The stack of `fp` in `pid` was just unwound, with frames no
    /// reader read (`unread`: `Unwind::unread_frames`) or not; `epoch`:
    /// the readers' epoch of a process (`Runtimes::epoch`).
    pub fn unwound(&mut self, pid: u32, fp: u64, unread: bool, epoch: impl Fn(u32) -> u32) {
        if !unread {
            return;
        }
        if self.kept >= MOST {
            self.drop_gone();
            if self.kept >= MOST {
                return;
            }
        }
        // After the unwind: a reader that learned the process during it
        // read this stack already.
        let epoch = epoch(pid);
        let e = self.unread.entry(pid).or_insert((epoch, Vec::new()));
        e.0 = epoch.min(e.0);
        e.1.push(fp);
        self.kept += 1;
    }

    /// Is `fp` to be unwound again (from the copy that just came)? Once.
    pub fn take_stale(&mut self, fp: u64) -> bool {
        !self.stale.is_empty() && self.stale.remove(&fp)
    }

    /// `fp` is forgotten (its thread exited and its blocks are written).
    pub fn forget(&mut self, fp: u64) {
        self.stale.remove(&fp);
    }

    /// The fingerprints gone stale since the last call, for BPF's `seen`
    /// map: those cut in a process whose readers' epoch has grown.
    pub fn newly_stale(&mut self, epoch: impl Fn(u32) -> u32) -> Vec<u64> {
        let mut out = Vec::new();
        self.unread.retain(|&pid, (then, fps)| {
            if epoch(pid) <= *then {
                return true;
            }
            out.append(fps);
            false
        });
        self.kept -= out.len();
        self.stale.extend(out.iter().copied());
        out
    }

    fn drop_gone(&mut self) {
        if self.last_drop.is_some_and(|t| t.elapsed().as_secs() < 1) {
            return;
        }
        self.last_drop = Some(std::time::Instant::now());
        self.unread.retain(|pid, _| std::path::Path::new(&format!("/proc/{pid}")).exists());
        self.kept = self.unread.values().map(|(_, f)| f.len()).sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A stack with unread frames is kept under its process, one without
    /// is not; they
    /// go stale (once) when that process's epoch grows, not another's.
    #[test]
    fn cut_stacks_stale_once_their_process_is_learned() {
        let learned = Cell::new(0u32);
        let epoch = |pid: u32| if pid == 7 { learned.get() } else { 0 };
        let mut r = Recut::default();
        r.unwound(7, 1, true, epoch);
        r.unwound(7, 2, false, epoch);
        r.unwound(8, 3, true, epoch);
        assert!(r.newly_stale(epoch).is_empty());
        assert!(!r.take_stale(1));
        learned.set(1);
        assert_eq!(r.newly_stale(epoch), [1]);
        assert!(r.newly_stale(epoch).is_empty(), "once");
        assert!(r.take_stale(1));
        assert!(!r.take_stale(1), "unwound again once");
        assert!(!r.take_stale(3));
        // Unread again after the reader learned it: not for want of it.
        r.unwound(7, 1, true, epoch);
        assert!(r.newly_stale(epoch).is_empty());
    }
}
