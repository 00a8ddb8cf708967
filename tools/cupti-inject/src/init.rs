//! What `InitializeInjection` does, once per process: open the stream,
//! load CUPTI, pick the clock, enable the activity kinds and the API
//! callbacks, then register the exit handler and the periodic flush.
//! Any step that leaves CUPTI unusable ends it with one warning.

use std::ffi::{c_void, CStr, CString};
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::abi::*;
use crate::activity::{buffer_completed, buffer_requested};
use crate::callback::on_api;
use crate::out::{self, give_up, Out};
use crate::{find, monotonic_ns, warn, State, STATE};

pub(crate) fn init() {
    let Some(file) = out::open() else {
        warn("WALLCLOCK_GPUTRACE_DIR is not set or not writable (run the program under gputrace)");
        return;
    };
    if start(file).is_some() {
        // SAFETY: `finish` is an extern "C" fn without arguments.
        unsafe { libc::atexit(out::finish) };
        start_flusher();
    }
}

/// Loads CUPTI, enables activity and the API callbacks, writes the `V`
/// line and the notes to `file`; the state, or None after a `W` line.
pub(crate) fn start(file: std::fs::File) -> Option<&'static State> {
    let mut w = BufWriter::with_capacity(1 << 16, file);
    let (cupti, version) = match load_cupti() {
        Ok(x) => x,
        Err(msg) => {
            give_up(&mut w, &msg);
            return None;
        }
    };
    let mut notes = Vec::new();
    if version > MAX_KNOWN_VERSION {
        notes.push(format!("CUPTI API version {version} is newer than {MAX_KNOWN_VERSION}, read with its layout"));
    }
    let (clock, clock_offset) = choose_clock(&cupti);
    if let Err(msg) = enable_activity(&cupti, &mut notes) {
        give_up(&mut w, &msg);
        return None;
    }
    let stacks = std::env::var("WALLCLOCK_GPU_STACKS").map(|v| v != "0").unwrap_or(true);
    let _ = writeln!(w, "V {version} {clock}");
    let state = State {
        cupti,
        version,
        pid: crate::pid(),
        clock_offset,
        clock,
        stacks,
        out: Mutex::new(Out::new(w)),
        done: AtomicBool::new(false),
        subscriber: std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()),
        callbacks: AtomicBool::new(false),
    };
    let st = STATE.get_or_init(|| state);
    subscribe(st, &mut notes);
    if let Ok(mut o) = st.out.lock() {
        for n in &notes {
            let _ = writeln!(o.w, "N {n}");
        }
        let _ = o.w.flush();
    }
    Some(st)
}

/// dlopens the first usable libcupti; the warning text otherwise.
fn load_cupti() -> Result<(Cupti, u32), String> {
    let cands = find::candidates();
    let mut why = Vec::new();
    for path in &cands {
        let Ok(c) = CString::new(path.as_os_str().as_encoded_bytes()) else { continue };
        // SAFETY: dlopen of a path; RTLD_LOCAL keeps its symbols private.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            // SAFETY: dlerror returns a NUL-terminated string or NULL.
            let e = unsafe { libc::dlerror() };
            // SAFETY: not null: dlerror's NUL-terminated message.
            let e = if e.is_null() { "cannot load".into() } else { unsafe { CStr::from_ptr(e) }.to_string_lossy() };
            why.push(e.into_owned());
            continue;
        }
        // SAFETY: `h` is a live handle.
        let cupti = match unsafe { Cupti::load(h) } {
            Ok(c) => c,
            Err(e) => {
                why.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        let mut v = 0u32;
        // SAFETY: writes the version.
        let r = unsafe { (cupti.get_version)(&mut v) };
        if r != CUPTI_SUCCESS || v < MIN_VERSION {
            why.push(format!("{}: CUPTI API version {v} is older than {MIN_VERSION} (CUDA 10)", path.display()));
            continue;
        }
        return Ok((cupti, v));
    }
    if cands.is_empty() {
        let explicit = std::env::var("WALLCLOCK_CUPTI_PATH").unwrap_or_default();
        let hint = if explicit.is_empty() {
            String::new()
        } else {
            format!(" (WALLCLOCK_CUPTI_PATH={explicit} does not exist)")
        };
        Err(format!("libcupti not found{hint}; set WALLCLOCK_CUPTI_PATH or install nvidia-cuda-cupti"))
    } else {
        Err(format!("no usable libcupti: {}", why.join("; ")))
    }
}

unsafe extern "C" fn timestamp_cb() -> u64 {
    monotonic_ns()
}

/// CUPTI's timestamps on CLOCK_MONOTONIC through the timestamp callback;
/// where that cannot be registered, CUPTI's own clock and its offset from
/// CLOCK_MONOTONIC measured now. (clock name, offset to subtract)
fn choose_clock(cupti: &Cupti) -> (&'static str, i64) {
    // SAFETY: CUPTI's documented call, with a callback of its signature.
    match cupti.register_timestamp.map(|f| unsafe { f(timestamp_cb) }) {
        Some(CUPTI_SUCCESS) => ("monotonic", 0i64),
        _ => {
            let mut t = 0u64;
            // SAFETY: CUPTI's documented call, writing to a valid u64.
            let ok = cupti.get_timestamp.is_some_and(|f| unsafe { f(&mut t) } == CUPTI_SUCCESS);
            let off = if ok { t as i64 - monotonic_ns() as i64 } else { 0 };
            ("calibrated", off)
        }
    }
}

/// The activity kinds recorded: what the outputs use. Not the runtime and
/// driver API kinds: they record every API call of the process (the cost
/// that makes tracing many small kernels slow), and the launch delay
/// they gave comes from the callback's own timestamp (`L` lines).
pub(crate) const KINDS: &[(u32, &str)] = &[
    (KIND_CONCURRENT_KERNEL, "kernel"),
    (KIND_MEMCPY, "memcpy"),
    (KIND_MEMSET, "memset"),
    (KIND_SYNCHRONIZATION, "synchronization"),
    (KIND_OVERHEAD, "overhead"),
];

/// The buffer callbacks and the activity kinds. Kernels are required (the
/// warning text otherwise); any other kind that fails becomes a note.
fn enable_activity(cupti: &Cupti, notes: &mut Vec<String>) -> Result<(), String> {
    // SAFETY: CUPTI's documented call, with callbacks of its signatures.
    let r = unsafe { (cupti.register_callbacks)(buffer_requested, buffer_completed) };
    if r != CUPTI_SUCCESS {
        return Err(format!("cuptiActivityRegisterCallbacks failed: {}", cupti.error(r)));
    }
    enable_kinds(cupti, notes)
}

/// The activity kinds (again, for a new attach window: the last one's
/// stop disabled them).
pub(crate) fn enable_kinds(cupti: &Cupti, notes: &mut Vec<String>) -> Result<(), String> {
    for &(kind, name) in KINDS {
        // SAFETY: CUPTI's documented call with one of its activity kinds.
        let r = unsafe { (cupti.activity_enable)(kind) };
        if r != CUPTI_SUCCESS {
            if kind == KIND_CONCURRENT_KERNEL {
                let why = if r == CUPTI_ERROR_NOT_INITIALIZED { " (no NVIDIA driver or GPU usable here)" } else { "" };
                return Err(format!("cannot enable CUPTI kernel activity: {}{why}", cupti.error(r)));
            }
            notes.push(format!("cannot enable {name} activity: {}", cupti.error(r)));
        }
    }
    Ok(())
}

/// The runtime and driver API callbacks that give launches their stacks;
/// without them the activity is still recorded, with a note.
pub(crate) fn subscribe(st: &State, notes: &mut Vec<String>) {
    let mut sub: *mut c_void = std::ptr::null_mut();
    // SAFETY: CUPTI's documented call, writing the subscriber to a valid pointer.
    let r = unsafe { (st.cupti.subscribe)(&mut sub, on_api, std::ptr::null_mut()) };
    if r != CUPTI_SUCCESS {
        notes.push(format!("cuptiSubscribe failed ({}): no launch stacks", st.cupti.error(r)));
        return;
    }
    st.subscriber.store(sub, Ordering::SeqCst);
    let mut all = true;
    for d in [DOMAIN_RUNTIME_API, DOMAIN_DRIVER_API] {
        // SAFETY: CUPTI's documented call with the live subscriber and one of its domains.
        let r = unsafe { (st.cupti.enable_domain)(1, sub, d) };
        if r != CUPTI_SUCCESS {
            notes.push(format!("cannot enable callback domain {d}: {}", st.cupti.error(r)));
            all = false;
        }
    }
    st.callbacks.store(all, Ordering::SeqCst);
}

/// A thread that flushes CUPTI's buffers every `WALLCLOCK_GPU_FLUSH_MS`
/// (default 1000, at least 10), so a long run's records reach the file
/// before exit; it ends when the exit handler has run.
fn start_flusher() {
    let period = std::env::var("WALLCLOCK_GPU_FLUSH_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000u64);
    let _ = std::thread::Builder::new().name("wallclock-gpu".into()).spawn(move || loop {
        std::thread::sleep(Duration::from_millis(period.max(10)));
        match STATE.get() {
            Some(st) if !st.done.load(Ordering::Relaxed) => {
                // SAFETY: a documented CUPTI call.
                unsafe { (st.cupti.flush_all)(0) };
            }
            _ => return,
        }
    });
}
