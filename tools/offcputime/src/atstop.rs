//! Stacks read from /proc at the stop for threads still blocked where the
//! BPF side could not copy the stack (every copy attempt found the ring
//! buffer full): /proc/PID/task/TID/syscall gives the user registers, the
//! stack memory comes from /proc/PID/mem and the kernel stack from
//! /proc/PID/task/TID/stack, as for the threads blocked at the start.
//!
//! Only a thread that has not run since it blocked is read: its CPU clock
//! (schedstat) must still be the one the BPF side saw at its last
//! switch-out, before and after the read, so the stack read is the one its
//! fingerprint stands for.

use wallclock_capture::event::WcThread;
use wallclock_capture::procfs::{self, Kallsyms};
use wallclock_capture::steal;
use wallclock_capture::unwind::Unwind;

use crate::collect::Stacks;

fn still_there(pid: u32, tid: u32, th: &WcThread) -> bool {
    steal::read(pid, tid).is_some_and(|c| c.exec_ns == th.out_exec)
}

/// Fill in the stacks of blocked threads whose fingerprint has none;
/// returns how many were read.
pub fn read_missing(threads: &[(u32, WcThread)], stacks: &mut Stacks, unwind: &mut Unwind) -> u64 {
    let mut found = Vec::new();
    let mut refreshed = std::collections::HashSet::new();
    for &(key, th) in threads {
        let (pid, fp, tid) = (th.pid, th.cur_fp, wallclock_capture::event::real_tid(key));
        if th.exit_ns != 0 || th.running != 0 || fp < 16 || stacks.has(fp) || !still_there(pid, tid, &th) {
            continue;
        }
        let mut ustack = Vec::new();
        if th.kthread == 0 {
            let Some((sp, pc)) = procfs::syscall_regs(pid, tid) else { continue };
            if refreshed.insert(pid) {
                unwind.refresh(pid);
            }
            // Named as the stacks taken in the capture are (V8's and
            // Erlang's frames from their runtime's tables).
            let now = wallclock_capture::realtime::monotonic_ns();
            ustack = unwind.unwind_named(pid, now, pc, sp, 0, 0, &procfs::read_stack(pid, sp, wallclock_capture::event::USTACK_MAX));
        }
        let kstack = procfs::task_stack_names(pid, tid);
        if still_there(pid, tid, &th) && !(ustack.is_empty() && kstack.is_empty()) {
            found.push((fp, ustack, kstack));
        }
    }
    let ksyms = Kallsyms::load_names(found.iter().flat_map(|(_, _, k)| k.iter().map(|(n, _)| n.as_str())));
    for (fp, u, k) in &found {
        stacks.insert(*fp, u.clone(), ksyms.resolve(k));
    }
    found.len() as u64
}
