//! Target selection and the flags every capture tool takes.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;

use crate::procfs;

/// Flags shared by the capture tools (bcc's spelling).
#[derive(Args, Debug, Clone)]
pub struct TargetArgs {
    /// Trace these processes only (comma-separated PIDs).
    #[arg(short = 'p', long = "pid", value_delimiter = ',', value_name = "PID")]
    pub pids: Vec<u32>,
    /// With -p: also trace every descendant of those processes, the ones
    /// they have at the start and the ones they create during the capture
    /// (through fork, clone and exec, as `-- COMMAND` always does).
    #[arg(short = 'C', long = "children", requires = "pids")]
    pub children: bool,
    /// With -p PID: the process waits in a wrapper to exec the command to
    /// profile (a script's start gate, as scripts/wallclock's): it is
    /// captured from its next exec, which opens the window, so that the
    /// wait before it is not counted as the command's time (what
    /// `-- COMMAND` always does).
    #[arg(long = "from-exec", requires = "pids")]
    pub from_exec: bool,
    /// Trace every process in this cgroup v2 directory and the cgroups below
    /// it (a container, a systemd service: /sys/fs/cgroup/system.slice/X.service),
    /// including processes that start in it or move into it during the capture.
    #[arg(short = 'G', long = "cgroup", value_name = "PATH", conflicts_with_all = ["pids", "tids"])]
    pub cgroup: Option<PathBuf>,
    /// Trace these threads only (comma-separated TIDs).
    #[arg(short = 't', long = "tid", value_delimiter = ',', value_name = "TID")]
    pub tids: Vec<u32>,
    /// User threads only (no kernel threads).
    #[arg(short = 'u', long = "user-threads-only", conflicts_with = "kernel_threads_only")]
    pub user_threads_only: bool,
    /// Kernel threads only (no user threads).
    #[arg(short = 'k', long = "kernel-threads-only")]
    pub kernel_threads_only: bool,
    /// Show user stacks only (no kernel frames).
    #[arg(short = 'U', long = "user-stacks-only", conflicts_with = "kernel_stacks_only")]
    pub user_stacks_only: bool,
    /// Show kernel stacks only (no user frames).
    #[arg(short = 'K', long = "kernel-stacks-only")]
    pub kernel_stacks_only: bool,
    /// Capture duration in seconds (default: until Ctrl-C or the target
    /// exits): the window, exactly, from its start (a held command's
    /// exec), its end written into the BPF side with the start.
    #[arg(short = 'd', long = "duration", value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Cut the capture into windows of this many seconds, back to back, and
    /// write each as a stream of its own once it closes: FILE.1, FILE.2...
    /// beside `-o FILE` (which still gets the whole capture). The windows
    /// tile the capture (one's end_ns is the next one's start_ns) and add
    /// up to it: one capture, never restarted.
    #[arg(long = "every", value_name = "SECONDS", requires = "output")]
    pub every: Option<f64>,
    /// Windows like --every, but each ending where the next window of
    /// another capture's `--every` ends (its FILE.N, read as it appears):
    /// two captures of one target cut at the same instants
    /// (scripts/wallclock runs oncputime so beside offcputime).
    #[arg(long = "every-follow", value_name = "FILE", requires = "output", conflicts_with = "every")]
    pub every_follow: Option<PathBuf>,
    /// Write the stream here instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write bcc-compatible folded lines, frames named in-process as
    /// `stacksym` would; a module that cannot be named is said once on
    /// stderr and its frames stay MODULE+0xOFFSET.
    #[arg(short = 'f', long = "folded")]
    pub folded: bool,
    /// Size of the ring buffer that carries new stacks to user space, MiB
    /// (a power of two; default 16K per thread of the targets at the
    /// start, from 4 to 64, or 16 system-wide, where every thread of the
    /// machine sends its stacks). Larger: fewer `[lost stack]` in bursts
    /// of new stacks; smaller: less memory.
    #[arg(long = "ringbuf-mb", value_name = "MIB")]
    pub ringbuf_mb: Option<u32>,
    /// Create FILE once the BPF programs are attached, so that a script
    /// running several captures can start its workload then (scripts/wallclock).
    #[arg(long = "ready-file", value_name = "FILE")]
    pub ready_file: Option<PathBuf>,
    #[command(flatten)]
    pub when: crate::when::WhenArgs,
}

impl TargetArgs {
    /// Check the PIDs/TIDs exist; one clear line otherwise.
    pub fn validate(&self, positional_duration: Option<f64>) -> Result<Option<f64>> {
        for &p in &self.pids {
            if !procfs::exists(p) {
                bail!("no such process: {p}");
            }
        }
        for &t in &self.tids {
            if procfs::tgid_of(t).is_none() {
                bail!("no such thread: {t}");
            }
        }
        if self.from_exec && self.pids.len() != 1 {
            bail!("--from-exec takes one process (-p PID), got {}", self.pids.len());
        }
        if self.every.is_some_and(|e| !(e >= 0.1 && e.is_finite())) {
            bail!("--every must be at least 0.1 seconds");
        }
        if (self.every.is_some() || self.every_follow.is_some()) && self.output.as_ref().is_some_and(|p| p.as_os_str() == "-") {
            bail!("--every writes FILE.1, FILE.2...: give -o FILE, not stdout");
        }
        if let Some(mb) = self.ringbuf_mb.filter(|m| !m.is_power_of_two() || *m > 1024) {
            bail!("--ringbuf-mb must be a power of two up to 1024, got {mb}");
        }
        let d = match (self.duration, positional_duration) {
            (Some(_), Some(_)) => bail!("give the duration once: -d SECONDS or a positional DURATION"),
            (a, b) => a.or(b),
        };
        if let Some(d) = d {
            if d.is_nan() || d <= 0.0 {
                bail!("duration must be positive, got {d}");
            }
        }
        Ok(d)
    }

    pub fn thread_kind(&self) -> i32 {
        if self.user_threads_only {
            1
        } else if self.kernel_threads_only {
            2
        } else {
            0
        }
    }

    /// Processes whose threads are enumerated at the start.
    pub fn known_pids(&self) -> Vec<u32> {
        let mut v = self.pids.clone();
        for &t in &self.tids {
            if let Some(p) = procfs::tgid_of(t) {
                v.push(p);
            }
        }
        v.sort_unstable();
        v.dedup();
        v
    }
}

pub use crate::realtime::monotonic_ns;
