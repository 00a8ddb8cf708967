//! The stacks of the fingerprints, as the ring buffer's events bring them.

use std::collections::HashMap;
use std::sync::Arc;

use wallclock_capture::event::{self, WcEvent};
use wallclock_capture::unwind::Unwind;

/// Stacks sent by BPF (or read from /proc at the stop), unwound while
/// their process lived. Shared (Arc), not copied, by every block of
/// theirs in the records being made: a system-wide capture holds tens of
/// thousands.
pub type Addrs = Arc<[u64]>;

#[derive(Default)]
pub struct Stacks {
    by_fp: HashMap<u64, (Addrs, Addrs)>,
    comm: HashMap<u32, String>,
    /// Whose a waker's stack is: pid, tid, name (for an interrupt, the
    /// thread it stopped).
    wakers: HashMap<u64, (u32, u32, String)>,
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
        if self.by_fp.contains_key(&e.fp) {
            return;
        }
        let ustack = unwind.event_stack(&e);
        self.by_fp.insert(e.fp, (ustack.into(), e.kstack_root_first().into()));
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
        self.by_fp.insert(fp, (ustack.into(), kstack.into()));
    }
}
