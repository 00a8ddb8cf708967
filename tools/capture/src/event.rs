//! Rust mirrors of `bpf/wallclock.h`; sizes are checked at compile time.

pub const COMM_LEN: usize = 16;
pub const KSTACK_MAX: usize = 127;
pub const USTACK_MAX: usize = 16384;
pub const NSTATES: usize = 5;

pub const ST_R: u32 = 0;
pub const ST_S: u32 = 1;
pub const ST_D: u32 = 2;
pub const ST_OTHER: u32 = 3;
pub const ST_INIT: u32 = 4;

pub const FP_LOST: u64 = 1;
pub const FP_INIT: u64 = 2;
pub const FP_NEWTHREAD: u64 = 3;
pub const FP_OVER_MAX: u64 = 4;
pub const FP_STATE_FILTERED: u64 = 5;

/// Names of the BPF `stats` slots, in order (`enum wc_stat`).
pub const STAT_NAMES: [&str; 8] = [
    "switches",
    "new_stacks",
    "ringbuf_drops",
    "map_full",
    "ustack_faults",
    "samples",
    "over_max_blocks",
    "missed_switches",
];

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct WcThread {
    pub last_ts: u64,
    pub begin_ns: u64,
    pub exit_ns: u64,
    pub on_ns: u64,
    pub off_ns: [u64; NSTATES],
    pub short_ns: [u64; NSTATES],
    pub short_cnt: [u64; NSTATES],
    pub lost_ns: [u64; NSTATES],
    pub cur_fp: u64,
    pub samples: u64,
    pub exec_base: u64,
    pub slice_wall_ns: u64,
    pub slice_exec_ns: u64,
    pub first_out: u64,
    pub first_exec: u64,
    pub out_exec: u64,
    pub last_off: u64,
    pub pend_fp: u64,
    pub pend_ns: u64,
    pub pend_cnt: u64,
    pub pend_state: u32,
    pub exec_known: u32,
    pub pid: u32,
    pub cur_state: u32,
    pub running: u32,
    pub kthread: u32,
    pub need_stack: u32,
    pub spare: u32,
    pub comm: [u8; COMM_LEN],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WcOkey {
    pub fp: u64,
    pub tid: u32,
    pub state: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct WcOval {
    pub ns: u64,
    pub count: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct WcEvent {
    pub fp: u64,
    pub ts: u64,
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    pub pid: u32,
    pub tid: u32,
    pub kind: u32,
    pub state: u32,
    pub kstack_bytes: u32,
    pub ustack_bytes: u32,
    pub comm: [u8; COMM_LEN],
    pub kstack: [u64; KSTACK_MAX],
    pub ustack: [u8; USTACK_MAX],
}

const _: () = assert!(std::mem::size_of::<WcThread>() == 8 * 38 + 16 + 16);
const _: () = assert!(std::mem::size_of::<WcOkey>() == 16);
const _: () = assert!(std::mem::size_of::<WcEvent>() == 80 + 8 * KSTACK_MAX + USTACK_MAX);

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

pub fn comm_str(c: &[u8]) -> String {
    let n = c.iter().position(|&b| b == 0).unwrap_or(c.len());
    String::from_utf8_lossy(&c[..n]).into_owned()
}

impl WcEvent {
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
