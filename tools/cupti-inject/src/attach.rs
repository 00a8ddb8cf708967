//! Attach to a running process (`gputrace -p PID`). gputrace stops the
//! process with ptrace, calls `dlopen` on this library in it, then
//! [`wallclock_gputrace_attach`] with the capture folder's name, and
//! resumes it. The capture is controlled through files in that folder,
//! with no environment (the process's is fixed by now). gputrace makes
//! the folder fresh at a random name in the process's /tmp (mode 0700,
//! given to the process's user) and passes its name only through the
//! call: a folder at a name made of the pid could be planted beforehand
//! by another user as a link, and root would write through it.
//!
//! ```text
//! DIR/attach      written by gputrace before it injects
//! DIR/gpu-PID.txt the stream (crate docs), `R` at the start
//! DIR/ready       the window has started (CUPTI enabled)
//! DIR/stop        written by gputrace: end the window
//! DIR/done        the window is closed, the file complete
//! ```
//!
//! At the stop the activity kinds are disabled, the API callbacks
//! unsubscribed, the buffers flushed: from then on the process runs as
//! before, with this library mapped and one idle file descriptor. A later
//! attach (`gputrace -p` again, or `wallclock --gpu PID` after it) finds
//! the library loaded and opens a new window in a new folder: the same
//! CUPTI, its kinds enabled and callbacks subscribed again, a new file
//! with its own `V` line and stack ids.

use std::ffi::{c_char, c_int, CStr};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::abi::FLUSH_FORCED;
use crate::{init, monotonic_ns, out, State, STATE};

/// An attach window is open: from its call to its `done` file.
static OPEN: AtomicBool = AtomicBool::new(false);
/// This library came by an attach, not by the driver's injection at
/// the start (a program started under gputrace is traced to its exit).
static ATTACHED: AtomicBool = AtomicBool::new(false);

/// Called by gputrace in the stopped process with the control folder's
/// path (a C string): starts the capture thread and returns at once. 0:
/// started; 1: no such control folder (or not a folder of this user's);
/// 2: this library already traces this process (started under gputrace,
/// or an attach window still open); 3: the thread could not start.
///
/// # Safety
/// `dir` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn wallclock_gputrace_attach(dir: *const c_char) -> c_int {
    if dir.is_null() {
        return 1;
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let dir = PathBuf::from(std::ffi::OsStr::from_bytes(unsafe { CStr::from_ptr(dir) }.to_bytes()));
    // A real folder (not a link) of this process's user, as gputrace made it.
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let ok = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir() && m.uid() == me);
    if !ok || !dir.join("attach").exists() {
        return 1;
    }
    if (STATE.get().is_some() && !ATTACHED.load(Ordering::SeqCst)) || OPEN.swap(true, Ordering::SeqCst) {
        return 2;
    }
    ATTACHED.store(true, Ordering::SeqCst);
    let spawned = std::thread::Builder::new().name("wallclock-gpu".into()).spawn(move || {
        let _ = std::panic::catch_unwind(|| run(&dir));
        OPEN.store(false, Ordering::SeqCst);
    });
    if spawned.is_ok() {
        0
    } else {
        OPEN.store(false, Ordering::SeqCst);
        3
    }
}

/// A new window on the CUPTI a window before this one loaded: a new
/// file, the activity kinds and the API callbacks on again. None after a
/// `W` line (the kernels' kind refused).
fn reopen(st: &'static State, file: std::fs::File) -> Option<&'static State> {
    let mut w = std::io::BufWriter::with_capacity(1 << 16, file);
    let mut notes = Vec::new();
    if let Err(msg) = init::enable_kinds(&st.cupti, &mut notes) {
        out::give_up(&mut w, &msg);
        return None;
    }
    let _ = writeln!(w, "V {} {}", st.version, st.clock);
    if let Ok(mut o) = st.out.lock() {
        *o = out::Out::new(w);
    }
    st.done.store(false, Ordering::SeqCst);
    init::subscribe(st, &mut notes);
    if let Ok(mut o) = st.out.lock() {
        for n in &notes {
            let _ = writeln!(o.w, "N {n}");
        }
        let _ = o.w.flush();
    }
    Some(st)
}

fn run(dir: &Path) {
    let pid = std::process::id();
    let Ok(file) = std::fs::OpenOptions::new().create(true).append(true).open(dir.join(format!("gpu-{pid}.txt")))
    else {
        return;
    };
    // The control file: `flush_ms N` and `cupti PATH` lines (the
    // process's environment was fixed before gputrace came).
    let ctl = std::fs::read_to_string(dir.join("attach")).unwrap_or_default();
    let get = |k: &str| ctl.lines().find_map(|l| l.strip_prefix(k)).map(|v| v.trim().to_string());
    if let Some(p) = get("cupti ") {
        let _ = crate::find::OVERRIDE.set(PathBuf::from(p));
    }
    let again = STATE.get();
    let st = match again {
        Some(st) => reopen(st, file),
        None => init::start(file),
    };
    if let Some(st) = st {
        if let Ok(mut o) = st.out.lock() {
            let _ = writeln!(o.w, "R {} {}", monotonic_ns(), u8::from(st.callbacks.load(Ordering::SeqCst)));
            let _ = o.w.flush();
        }
        if again.is_none() {
            // SAFETY: `finish` is an extern "C" fn without arguments: a
            // process that exits during a window still ends its file.
            unsafe { libc::atexit(out::finish) };
        }
    }
    let _ = std::fs::write(dir.join("ready"), "");
    let Some(st) = st else {
        let _ = std::fs::write(dir.join("done"), "");
        return;
    };
    let period = Duration::from_millis(get("flush_ms ").and_then(|v| v.parse().ok()).unwrap_or(1000u64).max(10));
    let mut last_flush = Instant::now();
    // gputrace gone (the folder removed) ends the window as a stop does.
    while dir.join("attach").exists() && !dir.join("stop").exists() {
        std::thread::sleep(Duration::from_millis(20));
        if last_flush.elapsed() >= period {
            // SAFETY: a documented CUPTI call.
            unsafe { (st.cupti.flush_all)(0) };
            last_flush = Instant::now();
        }
    }
    stop(st);
    let _ = std::fs::write(dir.join("done"), "");
}

/// Ends the window: no more callbacks or records, the last buffers
/// flushed, the tail written.
///
/// The activity kinds go first and the callbacks after: a launch entered
/// in between gets its `L` line and no activity, never an activity
/// without its launch stack.
fn stop(st: &State) {
    // SAFETY: CUPTI's documented calls, with the live subscriber and its own kinds and domains.
    unsafe {
        if let Some(disable) = st.cupti.activity_disable {
            for &(kind, _) in init::KINDS {
                disable(kind);
            }
        }
        st.done.store(true, Ordering::SeqCst);
        let sub = st.subscriber.swap(std::ptr::null_mut(), Ordering::SeqCst);
        if let Some(unsub) = st.cupti.unsubscribe.filter(|_| !sub.is_null()) {
            unsub(sub);
        }
        (st.cupti.flush_all)(FLUSH_FORCED);
    }
    out::write_tail(st);
}
