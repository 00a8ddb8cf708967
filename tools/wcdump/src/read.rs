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
    let skel = open.load().context("load the dump BPF program (bpf/dump.bpf.c)")?;
    let mut raws = pass(&skel)?;
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
    r.on_cpu != 0 && r.kthread == 0 && r.exit_state == 0
}

/// One pass of the task iterator.
fn pass(skel: &skel::DumpSkel) -> Result<Vec<Box<Raw>>> {
    let link = skel.progs.dump_task.attach().context("attach the task iterator")?;
    let mut it = libbpf_rs::Iter::new(&link).context("create the task iterator")?;
    let mut bytes = Vec::with_capacity(REC * 64);
    it.read_to_end(&mut bytes).context("read the task iterator")?;
    if bytes.len() % REC != 0 {
        bail!("the task iterator wrote {} bytes, not a whole number of {REC}-byte records", bytes.len());
    }
    Ok(bytes.chunks_exact(REC).map(Raw::from_bytes).collect())
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
