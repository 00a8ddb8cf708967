//! Process trees: the fork and exec events of bpf/tree.bpf.h, which share
//! the stack ring buffer so that they arrive in order with the stacks.

use std::mem::offset_of;

use crate::event::WcEvent;
use crate::unwind::Unwind;

/// `WC_KIND_EXEC` of bpf/tree.bpf.h: pid, tid; fp is the new executable's inode.
pub const KIND_EXEC: u32 = 2;
/// `WC_KIND_FORK`: pid and tid of the child; fp is its parent's tgid.
pub const KIND_FORK: u32 = 3;

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

/// The pid of an exec event.
pub fn exec_pid(data: &[u8]) -> Option<u32> {
    (u32_at(data, offset_of!(WcEvent, kind))? == KIND_EXEC).then(|| u32_at(data, offset_of!(WcEvent, pid))).flatten()
}

/// Apply a fork or exec event to the unwinder's mappings. True when
/// `data` was one (then it holds no stack); false for a stack event.
pub fn marker(data: &[u8], unwind: &mut Unwind) -> bool {
    let Some(kind) = u32_at(data, offset_of!(WcEvent, kind)) else { return false };
    if kind != KIND_EXEC && kind != KIND_FORK {
        return false;
    }
    let pid = u32_at(data, offset_of!(WcEvent, pid)).unwrap_or(0);
    let fp = data
        .get(offset_of!(WcEvent, fp)..offset_of!(WcEvent, fp) + 8)
        .map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap()));
    let ts = data
        .get(offset_of!(WcEvent, ts)..offset_of!(WcEvent, ts) + 8)
        .map_or(u64::MAX, |b| u64::from_ne_bytes(b.try_into().unwrap()));
    if kind == KIND_EXEC {
        unwind.exec(pid, fp, ts);
    } else {
        unwind.fork(fp as u32, pid, ts);
    }
    true
}
