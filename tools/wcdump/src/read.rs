//! One pass of the task iterator (bpf/dump.bpf.c) over a process's
//! threads: each thread's record as the kernel had it at the visit.

use std::io::Read;

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};

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

/// Every thread of `pid` now, in the iterator's order (by tid).
pub fn threads(pid: u32) -> Result<Vec<Box<Raw>>> {
    let obj = Box::leak(Box::new(std::mem::MaybeUninit::uninit()));
    let mut open = skel::DumpSkelBuilder::default().open(obj).context("open the dump BPF program")?;
    open.maps.rodata_data.as_deref_mut().expect("rodata").target_tgid = pid;
    let skel = open.load().context("load the dump BPF program (bpf/dump.bpf.c)")?;
    let link = skel.progs.dump_task.attach().context("attach the task iterator")?;
    let mut it = libbpf_rs::Iter::new(&link).context("create the task iterator")?;
    let mut bytes = Vec::with_capacity(REC * 64);
    it.read_to_end(&mut bytes).context("read the task iterator")?;
    if bytes.len() % REC != 0 {
        bail!("the task iterator wrote {} bytes, not a whole number of {REC}-byte records", bytes.len());
    }
    Ok(bytes
        .chunks_exact(REC)
        .map(|ch| {
            let mut r: Box<Raw> = Box::new(Raw::default_zeroed());
            // SAFETY: `Raw` is plain old data of exactly REC bytes (its
            // layout asserted by bindgen), every bit pattern valid; the
            // chunk is REC bytes long and the box's memory is its own.
            unsafe { std::ptr::copy_nonoverlapping(ch.as_ptr(), (&mut *r as *mut Raw).cast::<u8>(), REC) };
            r
        })
        .collect())
}

impl Raw {
    fn default_zeroed() -> Raw {
        // SAFETY: integers and arrays of integers only: all zeros is a
        // valid value.
        unsafe { std::mem::zeroed() }
    }
}
