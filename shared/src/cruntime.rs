//! The C runtime every program calls through (libc, libpthread, ld.so,
//! libstdc++...): its modules, and the names of its entry points for
//! frames that carry no module (plain folded input: bcc `-f`, perf
//! script). A reader looking for the program's own code skips these:
//! wcreport's user frame, the call site that names a lock
//! ([`crate::locks`]).

/// The C runtime's files, by the start of their names.
pub const RUNTIME: &[&str] =
    &["libc.so", "libc-", "libpthread", "ld-linux", "ld64.so", "libstdc++", "libgcc_s", "libm.so", "libdl", "librt"];

/// The C runtime's entry points, for frames that carry no module (plain
/// folded input: bcc `-f`, perf script): the function the program called
/// is the one *before* these.
pub const RUNTIME_NAMES: &[&str] = &[
    "pthread_",
    "__pthread",
    "__lll_",
    "lll_",
    "__futex",
    "futex_wait",
    "__GI_",
    "__libc_",
    "_IO_",
    "sem_wait",
    "sem_timedwait",
    "nanosleep",
    "clock_nanosleep",
    "__nanosleep",
    "usleep",
    "__sleep",
    "fsync",
    "fdatasync",
    "__fsync",
    "__fdatasync",
    "syscall",
    "epoll_wait",
    "__poll",
    "__select",
    "__read",
    "__write",
    "__pread",
    "__pwrite",
    "__recv",
    "__send",
    "__accept",
    "__connect",
    "__wait4",
    "__waitpid",
    "__open",
    "__close",
    "start_thread",
    "clone3",
    "__clone",
    "__GI___",
    "_dl_",
];

/// Syscall wrappers, matched whole (a prefix would catch `readline`).
pub const RUNTIME_EXACT: &[&str] = &[
    "read",
    "write",
    "pread64",
    "pwrite64",
    "readv",
    "writev",
    "recv",
    "recvfrom",
    "recvmsg",
    "send",
    "sendto",
    "sendmsg",
    "poll",
    "ppoll",
    "select",
    "pselect",
    "accept",
    "accept4",
    "connect",
    "open",
    "open64",
    "openat",
    "close",
    "ioctl",
    "waitpid",
    "wait4",
    "sleep",
    "pause",
    "sched_yield",
];

/// Whether a module's file name (`libc.so.6`, `libpthread-2.31.so`) is
/// the C runtime's.
pub fn is_runtime_file(base: &str) -> bool {
    RUNTIME.iter().any(|r| base.starts_with(r))
}

/// Whether a function name is one of the C runtime's entry points.
pub fn is_runtime_name(func: &str) -> bool {
    RUNTIME_EXACT.contains(&func) || RUNTIME_NAMES.iter().any(|p| func.starts_with(p))
}
