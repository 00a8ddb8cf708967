//! Launch correlation: CUPTI's API callback. At the enter of the
//! outermost launch/copy/memset/synchronize call on a thread it captures
//! the CPU stack; that call and every call nested in it get an `L` line
//! tying their correlation id to the stack's id.

use std::cell::Cell;
use std::ffi::{c_void, CStr};
use std::io::Write;
use std::sync::atomic::Ordering;

use crate::abi::{CallbackData, API_ENTER, DOMAIN_DRIVER_API, DOMAIN_RUNTIME_API};
use crate::{unwind, STATE};

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Stack id of the outermost recorded call in progress (0: none).
    static CUR: Cell<u32> = const { Cell::new(0) };
    static TID: Cell<u32> = const { Cell::new(0) };
}

fn tid() -> u32 {
    TID.with(|t| {
        if t.get() == 0 {
            // SAFETY: gettid has no preconditions.
            t.set(unsafe { libc::syscall(libc::SYS_gettid) } as u32);
        }
        t.get()
    })
}

/// Whether a call issues GPU work or waits for it (decided once per cbid).
fn interesting(domain: u32, cbid: u32, name: &[u8]) -> bool {
    use std::sync::atomic::AtomicU8;
    const N: usize = 2048;
    static CACHE: [[AtomicU8; N]; 2] = [const { [const { AtomicU8::new(0) }; N] }; 2];
    let slot = CACHE.get(domain as usize - 1).and_then(|c| c.get(cbid as usize));
    if let Some(s) = slot {
        match s.load(Ordering::Relaxed) {
            1 => return true,
            2 => return false,
            _ => {}
        }
    }
    let n = String::from_utf8_lossy(name);
    let yes = ["Launch", "Memcpy", "Memset", "Synchronize", "StreamWaitEvent", "EventQuery", "StreamQuery"]
        .iter()
        .any(|k| n.contains(k));
    if let Some(s) = slot {
        s.store(if yes { 1 } else { 2 }, Ordering::Relaxed);
    }
    yes
}

pub(crate) unsafe extern "C" fn on_api(_ud: *mut c_void, domain: u32, cbid: u32, data: *const c_void) {
    let Some(st) = STATE.get() else { return };
    if data.is_null() || !(domain == DOMAIN_RUNTIME_API || domain == DOMAIN_DRIVER_API) {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: CUPTI passes a CUpti_CallbackData for the API domains.
        let d = unsafe { &*(data as *const CallbackData) };
        if d.callback_site != API_ENTER {
            let depth = DEPTH.get().saturating_sub(1);
            DEPTH.set(depth);
            if depth == 0 {
                CUR.set(0);
            }
            return;
        }
        let depth = DEPTH.get();
        DEPTH.set(depth + 1);
        if depth == 0 {
            CUR.set(0);
        }
        if crate::pid() != st.pid || st.done.load(Ordering::Relaxed) {
            return;
        }
        let name: &[u8] = if d.function_name.is_null() {
            b"?"
        } else {
            // SAFETY: CUPTI's static, NUL-terminated function name.
            unsafe { CStr::from_ptr(d.function_name) }.to_bytes()
        };
        let mut sid = CUR.get();
        let mut frames = [0u64; unwind::MAX_FRAMES];
        let mut n = 0;
        if sid == 0 {
            if !interesting(domain, cbid, name) {
                return;
            }
            if st.stacks {
                n = unwind::capture(&mut frames);
            }
        }
        let t = tid();
        // The call's start: the launch delay of what it issues (CUPTI's
        // API activity records would say the same at a cost per API call).
        let at = crate::monotonic_ns();
        let Ok(mut o) = st.out.lock() else { return };
        if sid == 0 {
            sid = o.intern(&frames[..n]);
            CUR.set(sid);
        }
        o.thread(t);
        let _ = writeln!(o.w, "L {t} {} {sid} {at}", d.correlation_id);
    });
}
