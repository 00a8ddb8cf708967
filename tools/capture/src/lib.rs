//! What the capture tools (offcputime, oncputime, gputrace) share: the
//! capture driver (BPF load, attach, ring buffer, window, thread map),
//! privilege checks, target selection (pids, process trees, a cgroup),
//! launching `-- COMMAND`, the clock, /proc, user-stack unwinding with
//! .eh_frame, Ctrl-C.

pub mod bpf;
pub mod cgroup;
pub mod drain;
pub mod elf;
pub mod driver;
pub mod event;
pub mod events;
pub mod goroutines;
pub mod hotspot;
pub mod hidden;
pub mod jitcode;
pub mod jvm;
mod leafscan;
mod skel_glue;
pub mod launch;
pub mod mmaplog;
pub mod output;
pub mod privs;
pub mod probe;
pub mod session;
pub mod procfs;
pub mod php;
pub mod python;
pub mod ruby;
pub mod v8;
pub mod realtime;
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
