//! What a reader needs from one stack: the innermost function of *their*
//! code, the library call it waited in, and the kernel frame that says why.
//!
//! A user frame is not kernel, not a synthetic `[bracketed]` frame, and not
//! in a system library (a shared object under /lib or /usr/lib, or the
//! vDSO). When the whole user stack is in system libraries, the innermost
//! frame outside the core runtime (libc, libpthread, ld.so, libstdc++...)
//! stands in, then the innermost non-kernel frame.

use wallclock_stream::Frame;

/// Where a frame's code lives, for the choice of the user frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Place {
    User,
    /// A system library that is not the core runtime (libpython, libssl...).
    SystemLib,
    /// libc and the rest of the runtime every program calls through.
    Runtime,
    Kernel,
    Synthetic,
}

/// Is this frame `module+0x...` or a bare `0x...` (no symbol found)?
pub fn is_unnamed(f: &Frame) -> bool {
    let n = f.func.as_str();
    if let Some(hex) = n.strip_prefix("0x") {
        return !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit());
    }
    match n.rsplit_once("+0x") {
        Some((m, off)) => !m.is_empty() && !off.is_empty() && off.bytes().all(|b| b.is_ascii_hexdigit()),
        None => false,
    }
}

pub fn is_synthetic(f: &Frame) -> bool {
    !f.kernel && f.func.starts_with('[') && f.func.ends_with(']')
}

/// The module of a frame: its `module` field, else the `module` of a
/// `module+0x...` name; `None` when unknown (plain folded input, hex).
pub fn module_of(f: &Frame) -> Option<String> {
    if let Some(m) = f.module.as_deref().filter(|m| !m.is_empty()) {
        return Some(m.to_string());
    }
    if is_unnamed(f) {
        return f.func.rsplit_once("+0x").map(|(m, _)| m.to_string());
    }
    None
}

pub fn place(f: &Frame) -> Place {
    if f.kernel {
        return Place::Kernel;
    }
    if is_synthetic(f) {
        return Place::Synthetic;
    }
    let Some(m) = module_of(f) else { return place_by_name(&f.func) };
    let base = m.rsplit('/').next().unwrap_or(&m);
    if m.contains("vdso") {
        return Place::Runtime;
    }
    let shared_object = base.contains(".so") || base.starts_with("ld-");
    // Executables under /usr/lib (postgres, the JVM's launcher) are
    // programs. A bare file name (the stream's `module` when no maps
    // record gave its path): any shared object counts as a library.
    let system = if m.contains('/') {
        shared_object
            && ["/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/", "/usr/local/lib/"].iter().any(|d| m.starts_with(d))
    } else {
        shared_object
    };
    if !system {
        return Place::User;
    }
    if wallclock_stream::cruntime::is_runtime_file(base) {
        Place::Runtime
    } else {
        Place::SystemLib
    }
}

fn place_by_name(func: &str) -> Place {
    if wallclock_stream::cruntime::is_runtime_name(func) {
        Place::Runtime
    } else {
        Place::User
    }
}

/// Whether `f` is a Python function's frame (`py::NAME...`: from the
/// interpreter's own frames or its perf map).
pub fn is_python(f: &Frame) -> bool {
    f.func.starts_with("py::")
}

/// Whether `f` is CPython's own code: the `python3.X` executable or
/// `libpython3.X.so` (named or not).
pub fn in_interpreter(f: &Frame) -> bool {
    module_of(f).is_some_and(|m| {
        let base = m.rsplit('/').next().unwrap_or(&m);
        base.starts_with("python") || base.starts_with("libpython")
    })
}

/// Index (root-first) of the frame that stands for the user's code, or
/// None when the stack has no user-space frame at all.
pub fn user_frame(frames: &[Frame]) -> Option<usize> {
    let places: Vec<Place> = frames.iter().map(place).collect();
    let innermost = |ok: &dyn Fn(Place) -> bool| places.iter().rposition(|p| ok(*p));
    innermost(&|p| p == Place::User)
        .or_else(|| innermost(&|p| p == Place::SystemLib))
        .or_else(|| innermost(&|p| p == Place::Runtime))
}

/// A frame for display: unnamed ones say so, with the file's base name.
pub fn show(f: &Frame) -> String {
    if !is_unnamed(f) {
        return f.func.clone();
    }
    match f.func.rsplit_once("+0x") {
        Some((m, off)) => format!("{}+0x{off} (no name)", m.rsplit('/').next().unwrap_or(m)),
        None => format!("{} (no name)", f.func),
    }
}

/// A library function as the program called it: `__GI___nanosleep` ->
/// `nanosleep`, `___pthread_cond_timedwait64` -> `pthread_cond_timedwait64`.
pub fn call_name(f: &Frame) -> String {
    if is_unnamed(f) {
        return show(f);
    }
    let mut n = f.func.as_str();
    n = n.strip_prefix("__GI_").unwrap_or(n);
    n = n.trim_start_matches('_');
    n = n.strip_prefix("libc_").unwrap_or(n);
    if n.is_empty() {
        f.func.clone()
    } else {
        n.to_string()
    }
}

/// Scheduler plumbing and wait helpers: present in every wait, they say
/// nothing about why this one waited.
const PLUMBING: &[&str] = &[
    "__schedule",
    "schedule",
    "preempt_schedule",
    "io_schedule",
    "__cond_resched",
    "finish_task_switch",
    "__switch_to",
    "context_switch",
    "futex_do_wait",
    "__futex_wait",
    "folio_wait_bit",
    "wait_woken",
    "bit_wait",
    "__wait_on_bit",
    "out_of_line_wait_on_bit",
    "do_wait_for_common",
    "__wait_for_common",
    "wait_for_common",
    "__wait_event",
];
/// Kernel entry and exit: how the thread got into the kernel, not why it waits.
const ENTRY: &[&str] = &[
    "entry_SYSCALL",
    "do_syscall_64",
    "x64_sys_call",
    "syscall_exit",
    "exit_to_user_mode",
    "irqentry_exit",
    "asm_sysvec_",
    "asm_common_interrupt",
    "sysvec_",
    "ret_from_fork",
];

fn kernel_name(f: &Frame) -> &str {
    // `.isra.0`, `.constprop.0`, `.part.0`: compiler clones of one function.
    f.func.split_once('.').map_or(f.func.as_str(), |(a, _)| a)
}

/// The kernel frame that says why the thread is where it is, leaf first:
/// the first one that is neither scheduler plumbing nor kernel entry; a
/// runnable thread interrupted on its way (timer tick, IPI, syscall exit)
/// was `preempted`.
pub fn kernel_reason(frames: &[Frame], runnable: bool) -> Option<String> {
    let mut entered = false;
    for f in frames.iter().rev().filter(|f| f.kernel && !is_unnamed(f)) {
        let n = kernel_name(f);
        if PLUMBING.iter().any(|p| n.starts_with(p)) {
            continue;
        }
        if ENTRY.iter().any(|p| n.starts_with(p)) {
            entered = true;
            if runnable {
                return Some("preempted".to_string());
            }
            continue;
        }
        if let Some(sys) = syscall_of(n) {
            // The syscall itself is named by the call; say it was in it.
            return Some(format!("in {sys}"));
        }
        return Some(n.to_string());
    }
    (runnable && entered).then(|| "preempted".to_string())
}

/// `__x64_sys_fdatasync` -> `fdatasync`.
fn syscall_of(n: &str) -> Option<&str> {
    ["__x64_sys_", "__ia32_sys_", "__arm64_sys_", "__se_sys_", "__do_sys_", "ksys_"]
        .iter()
        .find_map(|p| n.strip_prefix(p))
        .filter(|s| !s.is_empty())
}

/// The syscall of a stack, from its kernel frames (root first).
pub fn syscall(frames: &[Frame]) -> Option<String> {
    frames.iter().filter(|f| f.kernel).find_map(|f| syscall_of(kernel_name(f)).map(str::to_string))
}
