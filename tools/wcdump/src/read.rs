//! One pass of the task iterator (bpf/dump.bpf.c) over a process's
//! threads: each thread's record as the kernel had it at the visit.

use std::collections::HashMap;
use std::io::Read;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags};

mod skel {
    #![allow(clippy::all, clippy::undocumented_unsafe_blocks, unused, non_snake_case, non_camel_case_types)]
    include!(concat!(env!("OUT_DIR"), "/dump.skel.rs"));
}

#[allow(non_camel_case_types, non_upper_case_globals, dead_code, clippy::all, clippy::undocumented_unsafe_blocks)]
mod c {
    include!(concat!(env!("OUT_DIR"), "/dump_h.rs"));
}

pub use c::wcd_thread as Raw;

const REC: usize = std::mem::size_of::<Raw>();

impl Raw {
    pub fn comm(&self) -> String {
        // c_char is i8 on x86-64, u8 on arm64.
        #[allow(clippy::unnecessary_cast)]
        let b: Vec<u8> = self.comm.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&b).into_owned()
    }

    /// Kernel addresses, leaf first, as bpf_get_task_stack gave them.
    pub fn kstack(&self) -> &[u64] {
        let n = (self.kstack_bytes as usize / 8).min(self.kstack.len());
        &self.kstack[..n]
    }

    pub fn ustack(&self) -> &[u8] {
        &self.ustack[..(self.ustack_bytes as usize).min(self.ustack.len())]
    }
}

/// Every thread of `pid` now, in the iterator's order (by tid). A thread
/// running at the visit is read again on its own CPU at its next tick
/// (`dump_tick` in bpf/dump.bpf.c): the registers it saved at its last
/// kernel entry no longer match its stack.
pub fn threads(pid: u32) -> Result<Vec<Box<Raw>>> {
    let obj = Box::leak(Box::new(std::mem::MaybeUninit::uninit()));
    let mut open = skel::DumpSkelBuilder::default().open(obj).context("open the dump BPF program")?;
    open.maps.rodata_data.as_deref_mut().expect("rodata").target_tgid = pid;
    let k = wallclock_capture::kernel::Kernel::get();
    open.progs.dump_task.set_autoload(k.sleepable_iter);
    open.progs.dump_task_ns.set_autoload(!k.sleepable_iter);
    if !k.lazy_maps_in_perf {
        // Before 6.1 a perf_event program's hash map is preallocated:
        // room for the threads running at the visit (one a CPU, and as
        // many again that a CPU took between the iterator's visits).
        let cpus = libbpf_rs::num_possible_cpus().unwrap_or(64) as u32;
        open.maps.ticks.set_map_flags(0).context("the tick map's flags")?;
        open.maps.ticks.set_max_entries((cpus * 2).clamp(16, 4096)).context("the tick map's size")?;
    }
    let skel = open.load().context("load the dump BPF program (bpf/dump.bpf.c)")?;
    let mut raws = pass(&skel)?;
    // Before 5.18 (stacks copied by user space): a thread blocked at the
    // visit that ran before its copy is read in another pass, up to three:
    // most threads are blocked most of the time, and a tick would read it
    // running, not where it waits.
    for _ in 0..3 {
        if !raws.iter().any(|r| r.on_cpu == 0 && unsettled(r)) {
            break;
        }
        let again = pass(&skel)?;
        for r in raws.iter_mut().filter(|r| r.on_cpu == 0 && unsettled(r)) {
            if let Some(x) = again.iter().find(|x| x.tid == r.tid && !moving(x)) {
                r.clone_from(x);
            }
        }
    }
    let running: Vec<u32> = raws.iter().filter(|r| moving(r)).map(|r| r.tid).collect();
    if running.is_empty() {
        return Ok(raws);
    }
    let mut ticked = ticks(&skel, &running);
    let mut again: Option<Vec<Box<Raw>>> = None;
    for r in raws.iter_mut().filter(|r| moving(r)) {
        if let Some(t) = ticked.remove(&r.tid) {
            *r = t;
            continue;
        }
        // No tick: it left the CPU before one, and its registers, saved
        // on the way into the kernel, match its stack now.
        if again.is_none() {
            again = Some(pass(&skel).unwrap_or_default());
        }
        match again.as_ref().and_then(|a| a.iter().find(|x| x.tid == r.tid)) {
            Some(x) if !moving(x) => r.clone_from(x),
            // Still on a CPU, untouched by its clock (or gone): no
            // user stack rather than one read from another moment.
            _ => r.ip = 0,
        }
    }
    Ok(raws)
}

/// On a CPU, with a user stack that moves as the dump reads it.
fn moving(r: &Raw) -> bool {
    r.kthread == 0 && r.exit_state == 0 && (r.on_cpu != 0 || unsettled(r))
}

/// A user thread whose stack user space could not copy as it was at the
/// visit (before 5.18, `copy_ustack`): it ran since. Read again at its
/// tick, as a running one.
fn unsettled(r: &Raw) -> bool {
    r.sp != 0 && r.ustack_bytes == 0 && !wallclock_capture::kernel::Kernel::get().sleepable_iter
}

/// One pass of the task iterator.
fn pass(skel: &skel::DumpSkel) -> Result<Vec<Box<Raw>>> {
    let sleepable = wallclock_capture::kernel::Kernel::get().sleepable_iter;
    let prog = if sleepable { &skel.progs.dump_task } else { &skel.progs.dump_task_ns };
    let link = prog.attach().context("attach the task iterator")?;
    let mut it = libbpf_rs::Iter::new(&link).context("create the task iterator")?;
    let mut bytes = Vec::with_capacity(REC * 64);
    it.read_to_end(&mut bytes).context("read the task iterator")?;
    if bytes.len() % REC != 0 {
        bail!("the task iterator wrote {} bytes, not a whole number of {REC}-byte records", bytes.len());
    }
    let mut raws: Vec<Box<Raw>> = bytes.chunks_exact(REC).map(Raw::from_bytes).collect();
    if !sleepable {
        raws.iter_mut().for_each(|r| copy_ustack(r));
    }
    Ok(raws)
}

/// A kernel without sleepable iterators (before 5.18) cannot copy another
/// task's user stack: copy it here from the stack pointer the kernel
/// saved, as the iterator would have (16K, else what is left of the
/// stack's last pages). The copy is the visit's only if the thread has not
/// switched since: its count of context switches (/proc/PID/task/TID/status)
/// is still the visit's after the copy. Else (it ran) the copy is dropped,
/// and the thread is read again at its tick (`unsettled`).
fn copy_ustack(r: &mut Raw) {
    if r.kthread != 0 || r.exit_state != 0 || r.sp == 0 || r.on_cpu != 0 || r.ustack_bytes != 0 {
        return;
    }
    let sp = r.sp;
    let head = 4096 - (sp as usize & 4095);
    for len in std::iter::once(r.ustack.len()).chain((0..4).rev().map(|k| head + k * 4096)) {
        if len > r.ustack.len() {
            continue;
        }
        if wallclock_capture::procmem::read(r.tid, sp, &mut r.ustack[..len]) {
            if wallclock_capture::procfs::switches(r.pid, r.tid) == Some(r.nsw) {
                r.ustack_bytes = len as u32;
            }
            return;
        }
    }
}

/// Each of `tids` as its own CPU clock's next tick (100 us of its CPU
/// time on) finds it; a thread that leaves the CPU first has none within
/// the 200 ms this waits at most.
fn ticks(skel: &skel::DumpSkel, tids: &[u32]) -> HashMap<u32, Box<Raw>> {
    let mut links = Vec::new();
    for &tid in tids {
        match wallclock_capture::events::open_thread_clock(tid, 100_000) {
            Ok(fd) => match skel.progs.dump_tick.attach_perf_event(fd) {
                Ok(l) => links.push(l),
                Err(e) => eprintln!("wcdump: warning: thread {tid}: attach its clock: {e}: its user stack left out unless it leaves the CPU"),
            },
            // Gone since the visit, or perf events refused.
            Err(e) => eprintln!("wcdump: warning: thread {tid}: perf_event_open: {e}: its user stack left out unless it leaves the CPU"),
        }
    }
    let mut got = HashMap::new();
    let deadline = Instant::now() + Duration::from_millis(200);
    while got.len() < tids.len() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
        for &tid in tids {
            if got.contains_key(&tid) {
                continue;
            }
            if let Ok(Some(v)) = skel.maps.ticks.lookup(&tid.to_ne_bytes(), MapFlags::ANY) {
                if v.len() == REC {
                    got.insert(tid, Raw::from_bytes(&v));
                }
            }
        }
    }
    drop(links);
    got
}

impl Raw {
    fn from_bytes(ch: &[u8]) -> Box<Raw> {
        assert_eq!(ch.len(), REC);
        // Not zeroed first: 1,000 threads' records are 17 MB.
        let mut r: Box<std::mem::MaybeUninit<Raw>> = Box::new_uninit();
        // SAFETY: `Raw` is plain old data of exactly REC bytes (its
        // layout asserted by bindgen), every bit pattern valid; the
        // slice is REC bytes long and the box's memory is its own; all
        // REC bytes are written before the box is taken as initialised.
        unsafe {
            std::ptr::copy_nonoverlapping(ch.as_ptr(), r.as_mut_ptr().cast::<u8>(), REC);
            r.assume_init()
        }
    }
}
