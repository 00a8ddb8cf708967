//! The interface between the capture driver and a tool's BPF skeleton:
//! what every capture program is told before load (capture.bpf.h's rodata
//! and map sizes), the maps and programs of capture.bpf.h and tree.bpf.h
//! that [`crate::capture_skel!`] reaches, and where a skeleton's object
//! lives.

use libbpf_rs::{MapMut, ProgramMut};

use crate::session::Filter;

/// What every capture program is told before load (capture.bpf.h's
/// rodata, the sizes of its maps).
#[derive(Debug, Clone, Copy)]
pub struct Common {
    pub filter: Filter,
    pub filter_tid: bool,
    pub thread_kind: i32,
    pub want_ustack: bool,
    pub want_kstack: bool,
    /// The task iterator at the start also sends the stacks of the
    /// threads blocked then (bpf/snapshot.bpf.h): system-wide offcputime.
    pub snap_stacks: bool,
    pub max_threads: u32,
    pub ringbuf_bytes: u32,
}

/// The maps of capture.bpf.h.
pub struct Maps<'a> {
    pub events: &'a MapMut<'static>,
    pub tgids: &'a MapMut<'static>,
    pub tids: &'a MapMut<'static>,
    pub threads: &'a MapMut<'static>,
    pub reborn: &'a MapMut<'static>,
    pub stats: &'a MapMut<'static>,
    pub py_threads: &'a MapMut<'static>,
    pub py_cfg: &'a MapMut<'static>,
    pub rb_cfg: &'a MapMut<'static>,
    pub rt_gen: &'a MapMut<'static>,
}

/// The programs of tree.bpf.h.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeProg {
    Exec,
    Fork,
}

/// An opened (not yet loaded) capture skeleton.
pub trait OpenCapture {
    /// Write capture.bpf.h's rodata, size its maps, and choose the
    /// flavour (tp_btf or raw_tp) of tree.bpf.h's programs.
    fn common(&mut self, c: &Common, btf: bool) -> Result<(), libbpf_rs::Error>;
}

/// A loaded capture skeleton.
pub trait CaptureSkel {
    fn maps(&self) -> Maps<'_>;
    /// The task iterator of snapshot.bpf.h.
    fn snapshot_prog(&self) -> &ProgramMut<'static>;
    fn tree_prog(&self, which: TreeProg, btf: bool) -> &ProgramMut<'static>;
    /// Write .bss: the window's start and end, and `tree_grown`.
    fn set_bss(&mut self, start_ns: Option<u64>, end_ns: Option<u64>, tree_grown: bool);
    /// This process is held until its exec: no target before then.
    fn hold(&mut self, tgid: u32);
    /// When the held process exec'd (0: not yet).
    fn exec_ns(&self) -> u64;
}

/// Storage for a skeleton's object: skeletons borrow it for as long as
/// the process runs.
pub fn object() -> &'static mut std::mem::MaybeUninit<libbpf_rs::OpenObject> {
    Box::leak(Box::new(std::mem::MaybeUninit::uninit()))
}
