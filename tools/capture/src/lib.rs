//! What the capture tools (offcputime, oncputime, gputrace) share: the
//! capture driver (BPF load, attach, ring buffer, window, thread map),
//! privilege checks, target selection (pids, process trees, a cgroup),
//! launching `-- COMMAND`, the clock, /proc, user-stack unwinding with
//! .eh_frame, the runtime readers (runtimes/), Ctrl-C.

pub mod arch;
pub mod bpf;
pub mod bpfsyms;
pub mod cgroup;
pub mod drain;
pub mod elf;
pub mod driver;
pub mod event;
pub mod events;
pub mod hidden;
pub mod kernel;
mod leafscan;
mod skel_glue;
pub mod launch;
pub mod mmaplog;
pub mod rootpath;
pub mod objects;
pub mod output;
pub mod privs;
pub mod probe;
pub mod session;
pub mod procfs;
pub mod procmem;
pub mod realtime;
pub mod runtimes;
pub mod samplers;
pub mod signal;
pub mod spool;
pub mod steal;
pub mod target;
pub mod textpages;
pub mod tree;
pub mod unwind;
pub mod wait;
pub mod when;
pub mod window;

/// For [`capture_skel!`] in the tools' crates.
pub use libbpf_rs;

/// The FILES OF THE TARGET section of offcputime's and oncputime's
/// `--help` (and so of their man pages): the bounds `safe_open` keeps on
/// what a profiled process controls. A macro, for `concat!`.
#[macro_export]
macro_rules! files_of_the_target_help {
    () => {
        "FILES OF THE TARGET:
    Files a profiled process controls are opened as such: no symbolic link
    is followed (under /proc/PID/root no component of the path may be one),
    each must be a regular file (not a fifo, socket or device), and a
    /tmp/perf-PID.map must belong to the process's user or be readable by
    everyone, and be no older than the process. A perf map is read up to
    256 MiB, 64 KiB a line, 4 Mi lines; a JVM's attach socket must be a
    socket of its user's, and its answer is read up to 1 MiB within 10 s.
    A file past a bound is skipped, said once on stderr with the reason;
    the rest of the profile is written."
    };
}
