//! CUPTI's activity buffers: handed out on request, and when CUPTI
//! returns them full, each record written as one line of the stream.

use std::ffi::{c_char, c_void, CStr};
use std::fmt::Write as _;
use std::io::Write;

use crate::abi::*;
use crate::{State, STATE};

const BUF_SIZE: usize = 4 << 20;

pub(crate) unsafe extern "C" fn buffer_requested(buf: *mut *mut u8, size: *mut usize, max: *mut usize) {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: posix_memalign writes `p`; CUPTI wants 8-byte alignment.
    let ok = unsafe { libc::posix_memalign(&mut p, 8, BUF_SIZE) } == 0;
    // SAFETY: CUPTI passes valid out-pointers.
    unsafe {
        *buf = if ok { p as *mut u8 } else { std::ptr::null_mut() };
        *size = if ok { BUF_SIZE } else { 0 };
        *max = 0;
    }
}

pub(crate) unsafe extern "C" fn buffer_completed(
    ctx: *mut c_void,
    stream: u32,
    buf: *mut u8,
    _size: usize,
    valid: usize,
) {
    if let Some(st) = STATE.get() {
        let _ = std::panic::catch_unwind(|| {
            let mut text = String::new();
            if !buf.is_null() && valid > 0 {
                let mut rec: *mut u32 = std::ptr::null_mut();
                // SAFETY: CUPTI walks its own buffer; each record starts with its kind.
                while unsafe { (st.cupti.get_next_record)(buf, valid, &mut rec) } == CUPTI_SUCCESS {
                    // SAFETY: `rec` points at a whole record of kind `*rec`.
                    unsafe { format_record(st, rec, &mut text) };
                }
            }
            let mut dropped = 0usize;
            // SAFETY: a documented CUPTI call.
            if unsafe { (st.cupti.get_num_dropped)(ctx, stream, &mut dropped) } == CUPTI_SUCCESS && dropped > 0 {
                let _ = writeln!(text, "D {dropped}");
            }
            if let Ok(mut o) = st.out.lock() {
                let _ = o.w.write_all(text.as_bytes());
            }
        });
    }
    // SAFETY: the buffer came from posix_memalign in buffer_requested.
    unsafe { libc::free(buf as *mut c_void) };
}

/// One line for a record; records of other kinds are skipped.
///
/// # Safety
/// `rec` must point at a complete CUPTI activity record.
unsafe fn format_record(st: &State, rec: *mut u32, out: &mut String) {
    let ts = |t: u64| if t == 0 { 0 } else { (t as i64 - st.clock_offset).max(0) as u64 };
    // SAFETY: rec points at a CUPTI record, which starts with its kind (format_record's contract); the kind says which layout the reads below have.
    match unsafe { *rec } {
        KIND_CONCURRENT_KERNEL => {
            // SAFETY: rec points at a whole record of this kind (the match on its kind); read_unaligned as CUPTI packs them.
            let k = unsafe { (rec as *const Kernel).read_unaligned() };
            let name = if k.name.is_null() {
                "?".into()
            } else {
                // SAFETY: a non-null name is CUPTI's NUL-terminated kernel name, alive while the buffer is.
                unsafe { CStr::from_ptr(k.name as *const c_char) }.to_string_lossy()
            };
            // Only Kernel5..Kernel9 have a graph id; a CUPTI older than
            // CUDA 11 delivers Kernel4, 144 bytes long: 0 (no graph) then.
            let graph = if st.version >= GRAPH_ID_MIN_VERSION {
                // SAFETY: GRAPH_ID_OFFSET lies inside every record layout of these versions (Kernel5..Kernel9).
                unsafe { (rec as *const u8).add(GRAPH_ID_OFFSET).cast::<u32>().read_unaligned() }
            } else {
                0
            };
            let _ = writeln!(
                out,
                "K {} {} {} {} {} {graph} {name}",
                k.correlation_id,
                ts(k.start),
                ts(k.end),
                k.device_id,
                k.stream_id
            );
        }
        KIND_MEMCPY => {
            // SAFETY: rec points at a whole record of this kind (the match on its kind); read_unaligned as CUPTI packs them.
            let m = unsafe { (rec as *const Memcpy).read_unaligned() };
            let _ = writeln!(
                out,
                "C {} {} {} {} {} {} {}",
                m.correlation_id,
                ts(m.start),
                ts(m.end),
                m.device_id,
                m.stream_id,
                m.copy_kind,
                m.bytes
            );
        }
        KIND_MEMSET => {
            // SAFETY: rec points at a whole record of this kind (the match on its kind); read_unaligned as CUPTI packs them.
            let m = unsafe { (rec as *const Memset).read_unaligned() };
            let _ = writeln!(
                out,
                "E {} {} {} {} {} {}",
                m.correlation_id,
                ts(m.start),
                ts(m.end),
                m.device_id,
                m.stream_id,
                m.bytes
            );
        }
        KIND_SYNCHRONIZATION => {
            // SAFETY: rec points at a whole record of this kind (the match on its kind); read_unaligned as CUPTI packs them.
            let s = unsafe { (rec as *const Sync).read_unaligned() };
            let _ =
                writeln!(out, "Y {} {} {} {} {}", s.correlation_id, ts(s.start), ts(s.end), s.sync_type, s.stream_id);
        }
        KIND_RUNTIME | KIND_DRIVER => {
            // SAFETY: rec points at a whole record of this kind (the match on its kind); read_unaligned as CUPTI packs them.
            let a = unsafe { (rec as *const Api).read_unaligned() };
            let dom = if a.kind == KIND_RUNTIME { DOMAIN_RUNTIME_API } else { DOMAIN_DRIVER_API };
            let _ = writeln!(
                out,
                "A {dom} {} {} {} {} {} {}",
                a.cbid,
                a.process_id,
                a.thread_id,
                a.correlation_id,
                ts(a.start),
                ts(a.end)
            );
        }
        KIND_OVERHEAD => {
            // SAFETY: rec points at a whole record of this kind (the match on its kind); read_unaligned as CUPTI packs them.
            let o = unsafe { (rec as *const Overhead).read_unaligned() };
            let _ = writeln!(out, "O {} {} {}", o.overhead_kind, ts(o.start), ts(o.end));
        }
        _ => {}
    }
}
