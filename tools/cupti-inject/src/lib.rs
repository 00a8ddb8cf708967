//! CUPTI injection library of `gputrace`.
//!
//! Loaded into a CUDA program through `CUDA_INJECTION64_PATH` (the driver
//! calls the exported `InitializeInjection` during `cuInit`). It finds
//! libcupti by absolute path ([`find`]), `dlopen`s it and speaks a
//! hand-written minimal ABI ([`abi`]). If no usable libcupti is found it
//! prints one warning line and leaves the program exactly as it was.
//!
//! It records GPU activity (kernels, memcpy, memset, synchronization,
//! runtime/driver API calls, CUPTI's overhead) with CLOCK_MONOTONIC
//! timestamps, and at the enter of each launch/copy/memset/synchronize API
//! call, the CPU stack of the OUTERMOST such call on the thread
//! ([`unwind`]); every nested call's correlation id maps to that stack.
//!
//! Transport: text lines appended to `$WALLCLOCK_GPUTRACE_DIR/gpu-PID.txt`
//! (one file per process, so forked workers do not interleave), read by
//! `gputrace` after the program exits. Timestamps are ns on
//! CLOCK_MONOTONIC, addresses hex, stacks root first:
//!
//! ```text
//! V VERSION CLOCK                      CUPTI version; clock "monotonic" or "calibrated"
//! N TEXT                               a note (what could not be enabled)
//! W TEXT                               the warning printed when CUPTI is unusable
//! T TID COMM                           a thread's name
//! S SID ADDR,ADDR,...                  an interned launch stack (may be empty)
//! L TID CORR SID START                 API call CORR on TID, entered at START, under stack SID
//! A DOMAIN CBID PID TID CORR START END an API activity record (older files; no longer enabled)
//! K CORR START END DEV STREAM GRAPH NAME  a kernel (mangled name last)
//! C CORR START END DEV STREAM COPYKIND BYTES  a memcpy
//! E CORR START END DEV STREAM BYTES    a memset
//! Y CORR START END TYPE STREAM         a synchronization (CPU waiting on the GPU)
//! O KIND START END                     CUPTI overhead
//! D N                                  N activity records dropped by CUPTI
//! M START END OFFSET PATH              an executable mapping (at exit)
//! R START CALLBACKS                    attached: the window starts (gputrace -p); CALLBACKS 1:
//!                                      every launch entered since has its L line, so an activity
//!                                      without one, its CORR below every L line's, was launched
//!                                      before the window
//! X END                                clean end (at exit, or at the end of an attach)
//! ```
//!
//! Attach (`gputrace -p PID`, [`attach`]): gputrace `dlopen`s this library
//! into the running process through ptrace and calls the exported
//! `wallclock_gputrace_attach(DIR)`, which starts a thread doing the same
//! as above, controlled through files in DIR, a private folder gputrace
//! made at a random name in the process's /tmp.

pub mod abi;
mod activity;
mod attach;
mod callback;
pub mod find;
mod init;
mod out;
pub mod unwind;

use std::ffi::c_int;
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, OnceLock};

use abi::Cupti;
use out::Out;

/// Everything the CUPTI callbacks and the exit handler share, set once by
/// a successful [`init`](init::init).
struct State {
    cupti: Cupti,
    /// CUPTI's API version: which record versions it delivers.
    version: u32,
    pid: u32,
    /// Subtracted from CUPTI timestamps (0 with the timestamp callback).
    clock_offset: i64,
    /// The clock's name, as the `V` line gives it.
    clock: &'static str,
    stacks: bool,
    out: Mutex<Out>,
    done: AtomicBool,
    /// CUPTI's subscriber handle, to unsubscribe at the end of an attach.
    subscriber: std::sync::atomic::AtomicPtr<std::ffi::c_void>,
    /// The API callbacks of both domains are on: every launch entered
    /// from now on gets its `L` line.
    callbacks: AtomicBool,
}

static STATE: OnceLock<State> = OnceLock::new();
static INIT: std::sync::Once = std::sync::Once::new();

fn warn(msg: &str) {
    eprintln!("wallclock-gpu: warning: {msg}; the program runs unprofiled");
}

static PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn forked() {
    PID.store(std::process::id(), std::sync::atomic::Ordering::Relaxed);
}

/// This process's id, cached (getpid is a system call, and the launch
/// path asks at every API call); a fork updates it.
fn pid() -> u32 {
    let p = PID.load(std::sync::atomic::Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: registers a handler without arguments, run in the child.
    unsafe { libc::pthread_atfork(None, None, Some(forked)) };
    forked();
    PID.load(std::sync::atomic::Ordering::Relaxed)
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Entry point called by the CUDA driver. Always reports success: a
/// failure here must not change how the program runs.
#[no_mangle]
pub extern "C" fn InitializeInjection() -> c_int {
    INIT.call_once(|| {
        if std::panic::catch_unwind(init::init).is_err() {
            warn("internal error while loading CUPTI");
        }
    });
    1
}
