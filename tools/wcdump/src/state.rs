//! A thread's state, from task->__state and what the iterator saw.

use crate::read::Raw;

// include/linux/sched.h
const TASK_INTERRUPTIBLE: u32 = 0x1;
const TASK_UNINTERRUPTIBLE: u32 = 0x2;
const TASK_STOPPED: u32 = 0x4;
const TASK_TRACED: u32 = 0x8;
const TASK_NOLOAD: u32 = 0x400;

/// The words `ps` users know, one per state: a thread on a CPU is
/// running; one that could run but waits for a CPU runnable; sleeping is
/// waiting for an event (S); disk is uninterruptible (D, I/O mostly);
/// idle is D without load (a kernel worker's wait, ps's I).
pub fn name(r: &Raw) -> &'static str {
    let s = r.state;
    if r.exit_state != 0 {
        "zombie"
    } else if r.on_cpu != 0 {
        "running"
    } else if s == 0 {
        "runnable"
    } else if s & TASK_TRACED != 0 {
        "traced"
    } else if s & TASK_STOPPED != 0 {
        "stopped"
    } else if s & TASK_UNINTERRUPTIBLE != 0 && s & TASK_NOLOAD != 0 {
        "idle"
    } else if s & TASK_UNINTERRUPTIBLE != 0 {
        "disk"
    } else if s & TASK_INTERRUPTIBLE != 0 {
        "sleeping"
    } else {
        "other"
    }
}

/// Whether it waits (sleeping or disk): what on is then worth reading.
pub fn blocked(r: &Raw) -> bool {
    matches!(name(r), "sleeping" | "disk" | "idle")
}
