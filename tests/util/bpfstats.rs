//! What BPF programs cost, as the kernel counts it: two captures on the
//! same tracepoints each stamp an event after the other's program has run
//! (or before), so the time between their stamps is the other's run time.
//! A test comparing two captures of the same threads derives its margin
//! from it.

use std::collections::HashMap;
use std::os::fd::{FromRawFd, OwnedFd};

/// The kernel counts run time and runs of every BPF program while this
/// lives (`BPF_ENABLE_STATS`: counted, not a setting left behind; the
/// sysctl `kernel.bpf_stats_enabled` does the same for the machine).
pub struct Enabled(#[allow(dead_code)] OwnedFd);

pub fn enable() -> Enabled {
    const BPF_ENABLE_STATS: libc::c_long = 32;
    const BPF_STATS_RUN_TIME: u32 = 0;
    let attr: [u32; 1] = [BPF_STATS_RUN_TIME];
    // SAFETY: the attribute is one u32, of the size given.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_ENABLE_STATS, attr.as_ptr(), 4u32) };
    assert!(fd >= 0, "BPF_ENABLE_STATS: {}", std::io::Error::last_os_error());
    // SAFETY: a new fd of ours.
    Enabled(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Per program tag (as in `bpf_prog_<tag>_<name>`): run time (ns) and
/// runs, for the BPF programs process `pid` holds open; empty once it
/// has exited.
pub fn of_process(pid: u32) -> HashMap<String, (u64, u64)> {
    let mut m = HashMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else { return m };
    for e in dir.flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else { continue };
        let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(str::trim);
        let num = |name: &str| field(name).and_then(|v| v.parse::<u64>().ok());
        if let (Some(tag), Some(ns), Some(n)) = (field("prog_tag"), num("run_time_ns"), num("run_cnt")) {
            m.insert(tag.to_string(), (ns, n));
        }
    }
    m
}
