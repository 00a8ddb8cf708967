//! The stacks of the fingerprints, as the ring buffer's events bring them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use wallclock_capture::event::{self, WcEvent};
use wallclock_capture::unwind::Unwind;

use crate::recut::Recut;

/// Stacks sent by BPF (or read from /proc at the stop), unwound while
/// their process lived. Shared (Arc), not copied, by every block of
/// theirs in the records being made: a system-wide capture holds tens of
/// thousands.
pub type Addrs = Arc<[u64]>;

#[derive(Default)]
pub struct Stacks {
    by_fp: HashMap<u64, (Addrs, Addrs)>,
    /// Every distinct user and kernel stack of `by_fp`, once: a thread
    /// that blocks with different words at the top of its stack (a
    /// deadline, a counter) has a new fingerprint at every block, for the
    /// same few stacks (offcputime's own main thread: 500 a second, 20
    /// fingerprints per stack system-wide).
    interned: HashSet<Addrs>,
    comm: HashMap<u32, String>,
    /// Whose a waker's stack is: pid, tid, name (for an interrupt, the
    /// thread it stopped).
    wakers: HashMap<u64, (u32, u32, String)>,
    /// The fingerprints each thread sent (tid -> fingerprint, time sent):
    /// a thread's fingerprints are its own (BPF mixes its tid in), so
    /// those sent before it exited go with it (`forget`).
    sent_by: HashMap<u32, Vec<(u64, u64)>>,
    /// --check-fingerprints: what the copies of known fingerprints found.
    check: Option<Check>,
    /// Stacks with frames no runtime reader read (cut short, or in JIT
    /// code), copied again once a reader has learned their process.
    recut: Recut,
}

/// Copies of a stack whose fingerprint was already known (BPF sends one
/// at every block under --check-fingerprints), and how many of them
/// unwound to another stack than the fingerprint's first: blocks whose
/// time the fingerprint would have put under the wrong stack.
#[derive(Default, Debug)]
pub struct Check {
    pub copies: u64,
    /// Blocked (S, D, other), and preempted (R).
    pub user_differs: u64,
    pub user_differs_r: u64,
    pub kernel_differs: u64,
    /// A copy cut short (the ring buffer filling) that agrees with the
    /// first as far as it goes.
    pub cut: u64,
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "fingerprint check: {} copies of known fingerprints, {} with another user stack ({} blocked, {} preempted), {} with another kernel stack, {} cut short",
            self.copies,
            self.user_differs + self.user_differs_r,
            self.user_differs,
            self.user_differs_r,
            self.kernel_differs,
            self.cut
        )
    }
}

/// Whether two root-first stacks are one, `a` or `b` possibly cut short
/// at the root (a copy that ends early, or that missed a page, loses its
/// outer frames and begins with `[truncated]`).
fn same_or_cut(a: &[u64], b: &[u64]) -> Option<bool> {
    if a == b {
        return Some(true);
    }
    let leaf = |s: &[u64]| s.iter().position(|&x| x < wallclock_stream::NAMED_ADDR_BASE).unwrap_or(0);
    let (a, b) = (&a[leaf(a)..], &b[leaf(b)..]);
    let n = a.len().min(b.len());
    (a[a.len() - n..] == b[b.len() - n..] && n > 0).then_some(false)
}

impl Stacks {
    /// One event of the ring buffer, possibly without the unread tail of
    /// its user-stack copy (see `wallclock_capture::drain`).
    pub fn event(&mut self, data: &[u8], unwind: &mut Unwind) {
        let Some(e) = WcEvent::parse(data) else { return };
        if e.kind == event::KIND_WAKER {
            // A waker may be in another process: its name is not the
            // blocked threads' (and an interrupt's is a bystander's).
            self.wakers.entry(e.fp).or_insert_with(|| (e.pid, e.tid, event::comm_str(&e.comm)));
        } else {
            self.comm.insert(e.tid, event::comm_str(&e.comm));
        }
        if self.recut.take_stale(e.fp) {
            let ustack = unwind.event_stack(&e);
            self.recut.unwound(e.pid, e.fp, unwind.unread_frames(e.pid, &ustack), |p| unwind.runtimes.epoch(p));
            let old = self.by_fp.remove(&e.fp);
            self.insert(e.fp, ustack, e.kstack_root_first());
            self.release(old);
            return;
        }
        if let Some((u, k)) = self.by_fp.get(&e.fp) {
            if let Some(c) = self.check.as_mut() {
                c.copies += 1;
                let (nu, nk) = (unwind.event_stack(&e), e.kstack_root_first());
                match same_or_cut(u, &nu) {
                    Some(true) => {}
                    Some(false) => c.cut += 1,
                    None if e.state == event::ST_R => c.user_differs_r += 1,
                    None => c.user_differs += 1,
                }
                c.kernel_differs += u64::from(k[..] != nk[..]);
            }
            return;
        }
        let ustack = unwind.event_stack(&e);
        self.recut.unwound(e.pid, e.fp, unwind.unread_frames(e.pid, &ustack), |p| unwind.runtimes.epoch(p));
        self.insert(e.fp, ustack, e.kstack_root_first());
        if e.kind != event::KIND_WAKER {
            self.sent_by.entry(e.tid).or_default().push((e.fp, e.ts));
        }
    }

    /// Drop the stacks of thread `tid`, which exited at `exit_ns` and
    /// whose blocks are all written out: those it sent until then, and
    /// `used` (the fingerprints its blocks were under). A thread that
    /// took its tid since keeps what it sent. The fingerprints dropped,
    /// for BPF to forget too (`seen`): sent again if ever met again.
    pub fn forget(&mut self, tid: u32, exit_ns: u64, used: impl IntoIterator<Item = u64>) -> Vec<u64> {
        let mut gone: Vec<u64> = used.into_iter().collect();
        if let Some(sent) = self.sent_by.get_mut(&tid) {
            sent.retain(|&(fp, ts)| {
                let mine = ts <= exit_ns;
                if mine {
                    gone.push(fp);
                }
                !mine
            });
            if sent.is_empty() {
                self.sent_by.remove(&tid);
            }
        }
        gone.sort_unstable();
        gone.dedup();
        gone.retain(|fp| {
            self.recut.forget(*fp);
            let Some(old) = self.by_fp.remove(fp) else { return false };
            release(&mut self.interned, old);
            true
        });
        gone
    }

    /// The fingerprints whose stacks, with frames no reader read, a
    /// runtime reader may now read whole: to be taken out of BPF's `seen`
    /// map, so that the next block there copies the stack again
    /// (recut.rs).
    pub fn newly_stale(&mut self, unwind: &Unwind) -> Vec<u64> {
        self.recut.newly_stale(|p| unwind.runtimes.epoch(p))
    }

    fn release(&mut self, old: Option<(Addrs, Addrs)>) {
        if let Some(old) = old {
            release(&mut self.interned, old);
        }
    }

    /// Stacks that check their fingerprints (--check-fingerprints).
    pub fn checking(on: bool) -> Stacks {
        Stacks { check: on.then(Check::default), ..Default::default() }
    }

    pub fn check(&self) -> Option<&Check> {
        self.check.as_ref()
    }

    pub fn get(&self, fp: u64) -> Option<&(Addrs, Addrs)> {
        self.by_fp.get(&fp)
    }

    /// The name of a thread as its last stack event gave it.
    pub fn comm(&self, tid: u32) -> Option<String> {
        self.comm.get(&tid).cloned()
    }

    /// pid, tid and name of a waker's stack.
    pub fn waker(&self, fp: u64) -> Option<&(u32, u32, String)> {
        self.wakers.get(&fp)
    }

    pub fn has(&self, fp: u64) -> bool {
        self.by_fp.contains_key(&fp)
    }

    pub fn insert(&mut self, fp: u64, ustack: Vec<u64>, kstack: Vec<u64>) {
        let (u, k) = (self.intern(ustack), self.intern(kstack));
        self.by_fp.insert(fp, (u, k));
    }

    fn intern(&mut self, a: Vec<u64>) -> Addrs {
        if let Some(have) = self.interned.get(&a[..]) {
            return have.clone();
        }
        let a: Addrs = a.into();
        self.interned.insert(a.clone());
        a
    }
}

/// A fingerprint's stacks, dropped: those no other fingerprint has leave
/// the set too.
fn release(interned: &mut HashSet<Addrs>, (u, k): (Addrs, Addrs)) {
    for a in [u, k] {
        // Held here and by the set only.
        if Arc::strong_count(&a) == 2 {
            interned.remove(&a[..]);
        }
    }
}
