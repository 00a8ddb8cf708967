//! What the capture tools (offcputime, oncputime, later gputrace) share:
//! privilege checks, target selection (pids, process trees, a cgroup),
//! launching `-- COMMAND`, BPF load errors, /proc, user-stack unwinding with .eh_frame, Ctrl-C.

pub mod bpf;
pub mod cgroup;
pub mod event;
pub mod launch;
pub mod output;
pub mod privs;
pub mod session;
pub mod procfs;
pub mod python;
pub mod signal;
pub mod steal;
pub mod target;
pub mod tree;
pub mod unwind;
