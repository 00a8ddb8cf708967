//! The records of `bpf/wallclock.h`, generated from the header itself by
//! bindgen (see build.rs): the same struct the BPF programs write, with a
//! compile-time check of every field's offset and every struct's size
//! against clang's layout of the header. Nothing here is a hand copy.

use std::sync::atomic::{AtomicU64, Ordering};

#[allow(non_camel_case_types, non_upper_case_globals, dead_code, clippy::all, clippy::undocumented_unsafe_blocks)]
mod c {
    include!(concat!(env!("OUT_DIR"), "/wallclock_h.rs"));
}

pub use c::{
    wc_event as WcEvent, wc_okey as WcOkey, wc_oval as WcOval, wc_pycfg as WcPycfg, wc_pyframe as WcPyframe,
    wc_thread as WcThread,
};
pub use c::{wc_wake as WcWake, wc_wkey as WcWkey};

/// A thread's key in the tools' thread lists: its tid, or for a thread
/// that took the tid of one whose entry BPF still held (`tgen` > 0, see
/// thread_reborn in bpf/capture.bpf.h) the tid with the tgen above a
/// tid's 22 bits (below 4,194,304, the kernel's largest `pid_max`), so
/// that two threads of one tid are two keys. [`real_tid`] gives the tid.
pub fn thread_key(tid: u32, tgen: u32) -> u32 {
    tid | (tgen & 0x3ff) << 22
}

/// The tid of a [`thread_key`].
pub fn real_tid(key: u32) -> u32 {
    key & ((1 << 22) - 1)
}

impl WcOkey {
    /// The block's state, without the tgen above it.
    pub fn st(&self) -> u32 {
        self.state & 0xffff
    }

    /// Its thread's [`thread_key`].
    pub fn key(&self) -> u32 {
        thread_key(self.tid, self.state >> 16)
    }
}

/// The kinds of a block's object (`wc_okey.oref >> 24`, `enum wc_obj`).
pub const OBJ_FD: u32 = c::WC_OBJ_FD;
pub const OBJ_FUTEX: u32 = c::WC_OBJ_FUTEX;
pub const OBJ_CHILD: u32 = c::WC_OBJ_CHILD;
pub const OBJ_MANY: u32 = c::WC_OBJ_MANY;

/// A waker's stack event (`WcEvent::kind`); its `state` is the context.
pub const KIND_WAKER: u32 = c::WC_KIND_WAKER;
/// A probe's stack (`--probe '... (stack)'`); fp is its event's `stack`.
pub const KIND_PROBE: u32 = c::WC_KIND_PROBE;
pub const PROBE_STACK: u64 = c::WC_PROBE_STACK as u64;
pub const WCTX_THREAD: u32 = c::WC_WCTX_THREAD;
pub const WCTX_HARDIRQ: u32 = c::WC_WCTX_HARDIRQ;
pub const WCTX_SOFTIRQ: u32 = c::WC_WCTX_SOFTIRQ;
pub const WCTX_NMI: u32 = c::WC_WCTX_NMI;

pub use c::{wc_tl_event as WcTlEvent, wc_tl_thread as WcTlThread};

pub use c::{wc_probe_event as WcProbeEvent, wc_span_stack as WcSpanStack};

/// Names of the `probe_stats` slots (`enum wc_probe_stat`) in the trailer.
pub const PROBE_STAT_NAMES: [&str; c::WC_PR_STAT_MAX as usize] =
    ["probe_events", "probe_drops", "probe_spans_too_deep", "probe_unmatched_exits", "probe_map_full"];
const _: () = assert!(c::WC_PR_EVENTS == 0 && c::WC_PR_DROPS == 1 && c::WC_PR_TOO_DEEP == 2 && c::WC_PR_UNMATCHED == 3);

/// Names of the timeline's `tl_stats` slots (`enum wc_tl_stat`), as the
/// stream's trailer counts them.
pub const TL_STAT_NAMES: [&str; c::WC_TL_STAT_MAX as usize] =
    ["timeline_events", "timeline_drops", "timeline_dropped_ns", "timeline_map_full"];
const _: () = assert!(c::WC_TL_EVENTS == 0 && c::WC_TL_DROPS == 1 && c::WC_TL_DROPPED_NS == 2 && c::WC_TL_MAP_FULL == 3);

pub const COMM_LEN: usize = c::WC_COMM_LEN as usize;
pub const KSTACK_MAX: usize = c::WC_KSTACK_MAX as usize;
pub const USTACK_MAX: usize = c::WC_USTACK_MAX as usize;

/// Stacks of threads blocked at the start that user space copied (a kernel
/// before 5.18), and those it could not (see `WcEvent::copy_ustack`).
static USER_COPIED: AtomicU64 = AtomicU64::new(0);
static USER_MOVED: AtomicU64 = AtomicU64::new(0);
pub const NSTATES: usize = c::WC_NSTATES as usize;

pub const ST_R: u32 = c::WC_ST_R;
pub const ST_S: u32 = c::WC_ST_S;
pub const ST_D: u32 = c::WC_ST_D;
pub const ST_OTHER: u32 = c::WC_ST_OTHER;
pub const ST_INIT: u32 = c::WC_ST_INIT;

pub const FP_LOST: u64 = c::WC_FP_LOST as u64;
pub const FP_INIT: u64 = c::WC_FP_INIT as u64;
pub const FP_NEWTHREAD: u64 = c::WC_FP_NEWTHREAD as u64;
pub const FP_OVER_MAX: u64 = c::WC_FP_OVER_MAX as u64;
pub const FP_STATE_FILTERED: u64 = c::WC_FP_STATE_FILTERED as u64;

const NSTATS: usize = c::WC_STAT_MAX as usize;

/// Names of the BPF `stats` slots, indexed by `enum wc_stat`.
pub const STAT_NAMES: [&str; NSTATS] = stat_names();

const fn stat_names() -> [&'static str; NSTATS] {
    let mut a = [""; NSTATS];
    a[c::WC_STAT_SWITCHES as usize] = "switches";
    a[c::WC_STAT_NEW_STACKS as usize] = "new_stacks";
    a[c::WC_STAT_RINGBUF_DROPS as usize] = "ringbuf_drops";
    a[c::WC_STAT_MAP_FULL as usize] = "map_full";
    a[c::WC_STAT_USTACK_FAULTS as usize] = "ustack_faults";
    a[c::WC_STAT_SAMPLES as usize] = "samples";
    a[c::WC_STAT_OVER_MAX as usize] = "over_max_blocks";
    a[c::WC_STAT_MISSED as usize] = "missed_switches";
    a[c::WC_STAT_USTACK_CUT as usize] = "ustack_cut";
    // A slot added to the enum without a name here fails the build.
    let mut i = 0;
    while i < NSTATS {
        assert!(!a[i].is_empty(), "a wc_stat slot has no name in STAT_NAMES");
        i += 1;
    }
    a
}

/// Read a `#[repr(C)]` plain-old-data value out of bytes written by BPF.
pub fn from_bytes<T: Copy>(b: &[u8]) -> Option<T> {
    if b.len() < std::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: length checked; T is a repr(C) struct of integers, valid for any bits.
    Some(unsafe { std::ptr::read_unaligned(b.as_ptr() as *const T) })
}

/// The bytes of a plain-old-data value (for map keys).
pub fn as_bytes<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: T is a repr(C) integer struct without padding.
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, std::mem::size_of::<T>()) }
}

/// A `char comm[WC_COMM_LEN]` as a string (up to its NUL).
pub fn comm_str(c: &[core::ffi::c_char]) -> String {
    // c_char is i8 on x86-64, u8 on arm64.
    #[allow(clippy::unnecessary_cast)]
    let b: Vec<u8> = c.iter().map(|&ch| ch as u8).take_while(|&b| b != 0).collect();
    // A thread names itself with any bytes (prctl PR_SET_NAME).
    wallclock_stream::names::from_bytes(&b)
}

impl WcEvent {
    /// An event as the ring buffer's consumer queues it: possibly without
    /// the unread tail of its user-stack copy (see `drain`), which reads
    /// as zeros. None when even the fixed part is cut. Boxed: on the
    /// stack its 18 KB put the callers' frames beyond a 16K stack copy,
    /// and profiles of the capture tools themselves stopped there.
    /// The stats of the user-space copies (`copy_ustack`), where there
    /// were any: `ustack_user_copied`, stacks copied as the thread blocked
    /// at the start; `ustack_user_moved`, threads that ran before the copy
    /// (their stack is their registers alone).
    pub fn user_copy_stats() -> Vec<(String, u64)> {
        let (c, m) = (USER_COPIED.load(Ordering::Relaxed), USER_MOVED.load(Ordering::Relaxed));
        if c + m == 0 {
            return Vec::new();
        }
        vec![("ustack_user_copied".into(), c), ("ustack_user_moved".into(), m)]
    }

    pub fn parse(data: &[u8]) -> Option<Box<WcEvent>> {
        if data.len() < std::mem::offset_of!(WcEvent, ustack) {
            return None;
        }
        let mut e = Box::<WcEvent>::new_zeroed();
        let n = data.len().min(std::mem::size_of::<WcEvent>());
        // SAFETY: WcEvent is a repr(C) struct of integers: all zeros is a
        // valid value, and so is any byte pattern copied over its prefix;
        // `n` is within both the data and the struct.
        let mut e = unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), e.as_mut_ptr().cast::<u8>(), n);
            e.assume_init()
        };
        if e.py_pad == c::WC_EV_USTACK_LATER {
            e.copy_ustack();
        }
        Some(e)
    }

    /// The user stack of a thread blocked at the start, which a kernel
    /// before 5.18 could not copy (bpf/snapshot.bpf.h): copied here from
    /// the stack pointer it saved, 64K, else what is left of the stack's
    /// last pages, as the BPF side copies. Kept only if the thread has not
    /// switched since the visit (its count then is in py[0].code) when the
    /// copy is done: else the stack is its registers alone, as before.
    fn copy_ustack(&mut self) {
        let at_visit = std::mem::take(&mut self.py[0].code);
        if self.sp == 0 || self.ustack_bytes != 0 {
            return;
        }
        let (pid, sp) = (self.pid, self.sp);
        let head = 4096 - (sp as usize & 4095);
        for len in std::iter::once(USTACK_MAX).chain((0..16).rev().map(|k| head + k * 4096)) {
            if len <= USTACK_MAX && crate::procmem::read(pid, sp, &mut self.ustack[..len]) {
                if crate::procfs::switches(pid, self.tid) == Some(at_visit) {
                    self.ustack_bytes = len as u32;
                    USER_COPIED.fetch_add(1, Ordering::Relaxed);
                } else {
                    USER_MOVED.fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
        }
        USER_MOVED.fetch_add(1, Ordering::Relaxed);
    }

    /// Kernel stack, root first.
    /// The frames of the tracing machinery that ran our program (the
    /// tracepoint's `__traceiter_*`, BPF dispatch) are not the thread's.
    /// The BPF side skips a fixed number of them; how many there are
    /// depends on the kernel build, so any left are trimmed here by name.
    pub fn kstack_root_first(&self) -> Vec<u64> {
        let n = (self.kstack_bytes as usize / 8).min(KSTACK_MAX);
        let mut v: Vec<u64> = self.kstack[..n].iter().rev().copied().filter(|&a| a != 0).collect();
        while v.last().is_some_and(|&a| crate::procfs::in_dispatch(a)) {
            v.pop();
        }
        v
    }
    pub fn ustack_bytes(&self) -> &[u8] {
        &self.ustack[..(self.ustack_bytes as usize).min(USTACK_MAX)]
    }
}
