//! In-process stack capture at API enter: libgcc's `_Unwind_Backtrace`,
//! which reads `.eh_frame`, so code built without frame pointers (Debian's
//! libraries, `-O2` C, Rust release builds, CPython) still unwinds.
//! Frames inside this library, libcupti and the CUDA driver are trimmed
//! from the leaf end: the leaf left is the runtime-API function or the
//! program's own call site.

use std::ffi::{c_int, c_void, CStr};
use std::sync::OnceLock;

pub const MAX_FRAMES: usize = 128;

const URC_NO_REASON: c_int = 0;
const URC_END_OF_STACK: c_int = 5;

extern "C" {
    fn _Unwind_Backtrace(trace: extern "C" fn(*mut c_void, *mut c_void) -> c_int, arg: *mut c_void) -> c_int;
    fn _Unwind_GetIP(ctx: *mut c_void) -> usize;
}

struct Acc {
    buf: [u64; MAX_FRAMES],
    n: usize,
}

extern "C" fn step(ctx: *mut c_void, arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Acc` passed to `_Unwind_Backtrace` below.
    let acc = unsafe { &mut *(arg as *mut Acc) };
    // SAFETY: `ctx` is the unwinder's live context.
    let ip = unsafe { _Unwind_GetIP(ctx) } as u64;
    if ip == 0 || acc.n == MAX_FRAMES {
        return URC_END_OF_STACK;
    }
    acc.buf[acc.n] = ip;
    acc.n += 1;
    URC_NO_REASON
}

/// Captures the calling thread's stack into `out`, ROOT FIRST, trimmed of
/// the CUDA/CUPTI/injection frames at the leaf end; returns its length.
/// All entries are return addresses except the leaf, which is moved one
/// byte back into its call instruction so that it symbolizes as an
/// instruction pointer (the stream's convention for the leaf).
pub fn capture(out: &mut [u64; MAX_FRAMES]) -> usize {
    let mut acc = Acc { buf: [0; MAX_FRAMES], n: 0 };
    // SAFETY: `step` only writes into `acc`, which outlives the call.
    unsafe { _Unwind_Backtrace(step, &mut acc as *mut Acc as *mut c_void) };
    let skip = skip_ranges();
    let first = acc.buf[..acc.n].iter().position(|&ip| !skip.iter().any(|&(s, e)| ip >= s && ip < e)).unwrap_or(acc.n);
    let frames = &acc.buf[first..acc.n];
    let n = frames.len();
    for (i, &ip) in frames.iter().enumerate() {
        out[n - 1 - i] = ip;
    }
    if n > 0 {
        out[n - 1] = out[n - 1].saturating_sub(1);
    }
    n
}

/// Executable ranges of this library, libcupti and libcuda, computed at
/// the first capture (all three are loaded by then).
fn skip_ranges() -> &'static [(u64, u64)] {
    static RANGES: OnceLock<Vec<(u64, u64)>> = OnceLock::new();
    RANGES.get_or_init(|| {
        let mut v: Vec<(u64, u64)> = Vec::new();
        // SAFETY: dl_iterate_phdr calls back with valid info pointers.
        unsafe { libc::dl_iterate_phdr(Some(collect), &mut v as *mut Vec<(u64, u64)> as *mut c_void) };
        v
    })
}

unsafe extern "C" fn collect(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
    // SAFETY: arguments as documented for dl_iterate_phdr.
    let (info, v) = unsafe { (&*info, &mut *(data as *mut Vec<(u64, u64)>)) };
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated path owned by the loader.
        unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy().into_owned()
    };
    let base = info.dlpi_addr;
    let mut segs = Vec::new();
    for i in 0..info.dlpi_phnum as usize {
        // SAFETY: dlpi_phdr has dlpi_phnum entries.
        let ph = unsafe { &*info.dlpi_phdr.add(i) };
        if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 {
            segs.push((base + ph.p_vaddr, base + ph.p_vaddr + ph.p_memsz));
        }
    }
    let me = capture as fn(&mut [u64; MAX_FRAMES]) -> usize as usize as u64;
    let file = name.rsplit('/').next().unwrap_or("");
    let ours = segs.iter().any(|&(s, e)| me >= s && me < e);
    if ours || file.starts_with("libcupti") || file.starts_with("libcuda.so") {
        v.extend(segs);
    }
    0
}
