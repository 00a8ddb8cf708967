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
//! L TID CORR SID DOMAIN CBID NAME      API call CORR on TID was issued under stack SID
//! A DOMAIN CBID PID TID CORR START END an API activity record
//! K CORR START END DEV STREAM GRAPH NAME  a kernel (mangled name last)
//! C CORR START END DEV STREAM COPYKIND BYTES  a memcpy
//! E CORR START END DEV STREAM BYTES    a memset
//! Y CORR START END TYPE STREAM         a synchronization (CPU waiting on the GPU)
//! O KIND START END                     CUPTI overhead
//! D N                                  N activity records dropped by CUPTI
//! M START END OFFSET PATH              an executable mapping (at exit)
//! X END                                clean end
//! ```

pub mod abi;
pub mod find;
pub mod unwind;

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use abi::*;

struct State {
    cupti: Cupti,
    pid: u32,
    /// Subtracted from CUPTI timestamps (0 with the timestamp callback).
    clock_offset: i64,
    stacks: bool,
    out: Mutex<Out>,
    done: AtomicBool,
}

struct Out {
    w: BufWriter<File>,
    stacks: HashMap<Box<[u64]>, u32>,
    threads: HashSet<u32>,
}

static STATE: OnceLock<State> = OnceLock::new();
static INIT: std::sync::Once = std::sync::Once::new();
const BUF_SIZE: usize = 4 << 20;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Stack id of the outermost recorded call in progress (0: none).
    static CUR: Cell<u32> = const { Cell::new(0) };
    static TID: Cell<u32> = const { Cell::new(0) };
}

fn warn(msg: &str) {
    eprintln!("wallclock-gpu: warning: {msg}; the program runs unprofiled");
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

unsafe extern "C" fn timestamp_cb() -> u64 {
    monotonic_ns()
}

/// Entry point called by the CUDA driver. Always reports success: a
/// failure here must not change how the program runs.
#[no_mangle]
pub extern "C" fn InitializeInjection() -> c_int {
    INIT.call_once(|| {
        if std::panic::catch_unwind(init).is_err() {
            warn("internal error while loading CUPTI");
        }
    });
    1
}

fn open_out() -> Option<File> {
    let dir = std::env::var_os("WALLCLOCK_GPUTRACE_DIR")?;
    let path = std::path::Path::new(&dir).join(format!("gpu-{}.txt", std::process::id()));
    std::fs::OpenOptions::new().create(true).append(true).open(path).ok()
}

fn init() {
    let Some(file) = open_out() else {
        warn("WALLCLOCK_GPUTRACE_DIR is not set or not writable (run the program under gputrace)");
        return;
    };
    let mut w = BufWriter::with_capacity(1 << 16, file);
    let (cupti, version) = match load_cupti() {
        Ok(x) => x,
        Err(msg) => {
            let _ = writeln!(w, "W {msg}");
            let _ = w.flush();
            warn(&msg);
            return;
        }
    };
    let mut notes = Vec::new();
    if version > MAX_KNOWN_VERSION {
        notes.push(format!("CUPTI API version {version} is newer than {MAX_KNOWN_VERSION}, read with its layout"));
    }
    // SAFETY (all calls below): CUPTI's documented calls with valid arguments.
    let (clock, clock_offset) = match cupti.register_timestamp.map(|f| unsafe { f(timestamp_cb) }) {
        Some(CUPTI_SUCCESS) => ("monotonic", 0i64),
        _ => {
            let mut t = 0u64;
            let ok = cupti.get_timestamp.is_some_and(|f| unsafe { f(&mut t) } == CUPTI_SUCCESS);
            let off = if ok { t as i64 - monotonic_ns() as i64 } else { 0 };
            ("calibrated", off)
        }
    };
    let r = unsafe { (cupti.register_callbacks)(buffer_requested, buffer_completed) };
    if r != CUPTI_SUCCESS {
        let msg = format!("cuptiActivityRegisterCallbacks failed: {}", cupti.error(r));
        let _ = writeln!(w, "W {msg}");
        let _ = w.flush();
        warn(&msg);
        return;
    }
    let kinds = [
        (KIND_CONCURRENT_KERNEL, "kernel"),
        (KIND_MEMCPY, "memcpy"),
        (KIND_MEMSET, "memset"),
        (KIND_SYNCHRONIZATION, "synchronization"),
        (KIND_RUNTIME, "runtime API"),
        (KIND_DRIVER, "driver API"),
        (KIND_OVERHEAD, "overhead"),
    ];
    for (kind, name) in kinds {
        let r = unsafe { (cupti.activity_enable)(kind) };
        if r != CUPTI_SUCCESS {
            if kind == KIND_CONCURRENT_KERNEL {
                let msg = format!("cannot enable CUPTI kernel activity: {}", cupti.error(r));
                let _ = writeln!(w, "W {msg}");
                let _ = w.flush();
                warn(&msg);
                return;
            }
            notes.push(format!("cannot enable {name} activity: {}", cupti.error(r)));
        }
    }
    let stacks = std::env::var("WALLCLOCK_GPU_STACKS").map(|v| v != "0").unwrap_or(true);
    let _ = writeln!(w, "V {version} {clock}");
    let state = State {
        cupti,
        pid: std::process::id(),
        clock_offset,
        stacks,
        out: Mutex::new(Out { w, stacks: HashMap::new(), threads: HashSet::new() }),
        done: AtomicBool::new(false),
    };
    let st = STATE.get_or_init(|| state);
    let mut sub: *mut c_void = std::ptr::null_mut();
    let r = unsafe { (st.cupti.subscribe)(&mut sub, on_api, std::ptr::null_mut()) };
    if r != CUPTI_SUCCESS {
        notes.push(format!("cuptiSubscribe failed ({}): no launch stacks", st.cupti.error(r)));
    } else {
        for d in [DOMAIN_RUNTIME_API, DOMAIN_DRIVER_API] {
            let r = unsafe { (st.cupti.enable_domain)(1, sub, d) };
            if r != CUPTI_SUCCESS {
                notes.push(format!("cannot enable callback domain {d}: {}", st.cupti.error(r)));
            }
        }
    }
    if let Ok(mut o) = st.out.lock() {
        for n in &notes {
            let _ = writeln!(o.w, "N {n}");
        }
        let _ = o.w.flush();
    }
    // SAFETY: `finish` is an extern "C" fn without arguments.
    unsafe { libc::atexit(finish) };
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
        let hint = if explicit.is_empty() { String::new() } else { format!(" (WALLCLOCK_CUPTI_PATH={explicit} does not exist)") };
        Err(format!("libcupti not found{hint}; set WALLCLOCK_CUPTI_PATH or install nvidia-cuda-cupti"))
    } else {
        Err(format!("no usable libcupti: {}", why.join("; ")))
    }
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

unsafe extern "C" fn on_api(_ud: *mut c_void, domain: u32, cbid: u32, data: *const c_void) {
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
        if std::process::id() != st.pid || st.done.load(Ordering::Relaxed) {
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
        let Ok(mut o) = st.out.lock() else { return };
        if sid == 0 {
            sid = intern(&mut o, &frames[..n]);
            CUR.set(sid);
        }
        if o.threads.insert(t) {
            let comm = std::fs::read_to_string(format!("/proc/self/task/{t}/comm")).unwrap_or_default();
            let _ = writeln!(o.w, "T {t} {}", comm.trim_end());
        }
        let _ = writeln!(o.w, "L {t} {} {sid} {domain} {cbid} {}", d.correlation_id, String::from_utf8_lossy(name));
    });
}

fn intern(o: &mut Out, frames: &[u64]) -> u32 {
    if let Some(&id) = o.stacks.get(frames) {
        return id;
    }
    let id = o.stacks.len() as u32 + 1;
    let mut line = format!("S {id} ");
    for (i, a) in frames.iter().enumerate() {
        let _ = write!(line, "{}{a:x}", if i > 0 { "," } else { "" });
    }
    let _ = writeln!(o.w, "{line}");
    o.stacks.insert(frames.into(), id);
    id
}

unsafe extern "C" fn buffer_requested(buf: *mut *mut u8, size: *mut usize, max: *mut usize) {
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

unsafe extern "C" fn buffer_completed(ctx: *mut c_void, stream: u32, buf: *mut u8, _size: usize, valid: usize) {
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
    // SAFETY (reads below): the record's kind says which layout it has.
    match unsafe { *rec } {
        KIND_CONCURRENT_KERNEL => {
            let k = unsafe { (rec as *const Kernel).read_unaligned() };
            let name = if k.name.is_null() {
                "?".into()
            } else {
                unsafe { CStr::from_ptr(k.name as *const c_char) }.to_string_lossy()
            };
            // Graph id sits at offset 156 in Kernel5..Kernel9 (Kernel4 is
            // 144 bytes long, CUDA < 11: no graph id).
            let graph = unsafe { (rec as *const u8).add(156).cast::<u32>().read_unaligned() };
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
            let s = unsafe { (rec as *const Sync).read_unaligned() };
            let _ = writeln!(out, "Y {} {} {} {} {}", s.correlation_id, ts(s.start), ts(s.end), s.sync_type, s.stream_id);
        }
        KIND_RUNTIME | KIND_DRIVER => {
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
            let o = unsafe { (rec as *const Overhead).read_unaligned() };
            let _ = writeln!(out, "O {} {} {}", o.overhead_kind, ts(o.start), ts(o.end));
        }
        _ => {}
    }
}

/// At exit: last flush, the executable mappings, the end mark.
extern "C" fn finish() {
    let Some(st) = STATE.get() else { return };
    if std::process::id() != st.pid || st.done.swap(true, Ordering::SeqCst) {
        return;
    }
    // SAFETY: a documented CUPTI call; no lock of ours is held.
    unsafe { (st.cupti.flush_all)(FLUSH_FORCED) };
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let Ok(mut o) = st.out.lock() else { return };
    for l in maps.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 6 || !f[1].contains('x') || !f[5].starts_with('/') {
            continue;
        }
        let (Some((s, e)), Ok(off)) = (f[0].split_once('-'), u64::from_str_radix(f[2], 16)) else { continue };
        let _ = writeln!(o.w, "M {s} {e} {off:x} {}", f[5..].join(" "));
    }
    let _ = writeln!(o.w, "X {}", monotonic_ns());
    let _ = o.w.flush();
}
