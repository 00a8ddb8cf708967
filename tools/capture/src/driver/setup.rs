//! Before the capture window opens: what the BPF side is told
//! ([`common`]), the load (tp_btf, or raw_tp where tp_btf is refused),
//! the exec and fork programs, the kernel's mmap records the unwinder
//! reads, and the task iterator that gives every target thread alive at
//! the start its entry.

use std::time::Duration;

use anyhow::{Context, Result};
use libbpf_rs::Link;

use super::captured::Request;
use super::skel::{CaptureSkel, Common, TreeProg};
use super::tool::Tool;
use crate::bpf;
use crate::mmaplog::MmapLog;
use crate::session::Session;
use crate::unwind::Unwind;

/// What the BPF side is told before load, from the command line and the
/// session.
pub(super) fn common(req: &Request<'_>, sess: &Session) -> Common {
    let args = req.target;
    Common {
        filter: sess.filter(),
        filter_tid: !args.tids.is_empty(),
        thread_kind: args.thread_kind(),
        want_ustack: !args.kernel_stacks_only,
        want_kstack: !args.user_stacks_only,
        snap_stacks: req.blocked_stacks && sess.system_wide(),
        max_threads: req.max_threads,
        ringbuf_bytes: match args.ringbuf_mb {
            Some(mb) => mb << 20,
            None => crate::drain::ring_bytes(sess.system_wide(), sess.pids.iter().map(|&p| crate::procfs::threads(p).len()).sum()),
        },
    }
}

pub(super) fn load<T: Tool>(tool: &T, common: &Common) -> Result<(T::Skel, bool)> {
    // tp_btf where the kernel gives the task as a BTF pointer (5.15), else
    // raw_tp: bpf/compat.bpf.h.
    let want_btf = std::env::var_os("WALLCLOCK_FORCE_RAW_TP").is_none() && crate::kernel::Kernel::get().btf_task;
    match tool.load(common, want_btf) {
        Ok(s) => Ok((s, want_btf)),
        Err(e) if want_btf => match tool.load(common, false) {
            Ok(s) => Ok((s, false)),
            Err(_) => Err(bpf::load_error(T::NAME, e)),
        },
        Err(e) => Err(bpf::load_error(T::NAME, e)),
    }
}

/// The exec program (the unwinder follows images), and with a tree the
/// fork program (new processes join the target).
pub(super) fn attach_tree(skel: &impl CaptureSkel, btf: bool, follow: bool) -> Result<Vec<Link>> {
    let exec = skel.tree_prog(TreeProg::Exec, btf);
    let mut links = vec![exec.attach().context("attaching to sched_process_exec")?];
    if follow {
        let fork = skel.tree_prog(TreeProg::Fork, btf);
        links.push(fork.attach().context("attaching to sched_process_fork")?);
    }
    Ok(links)
}

/// Run the task iterator once: every target thread alive at the start
/// gets its entry as it is then (bpf/snapshot.bpf.h).
pub(super) fn snapshot(skel: &impl CaptureSkel, mut wait: impl FnMut()) -> Result<()> {
    use std::io::Read;
    let link = skel.snapshot_prog().attach_iter_with_opts(libbpf_rs::IterOpts::None).context("attaching the task iterator")?;
    let mut it = libbpf_rs::Iter::new(&link).context("creating the task iterator")?;
    let mut buf = [0u8; 4096];
    // EAGAIN: the ring buffer is half full; the drain thread empties it
    // into a queue of bounded size, which `wait` works off.
    // Five seconds without progress is an error.
    let mut deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match it.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(_) => deadline = std::time::Instant::now() + Duration::from_secs(5),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && std::time::Instant::now() < deadline => wait(),
            Err(e) => return Err(e).context("running the task iterator"),
        }
    }
}

/// Seconds as ns.
pub(super) fn secs_ns(secs: f64) -> u64 {
    (secs * 1e9).round() as u64
}

/// Once, what this kernel cannot give and what is done instead (also in
/// the stream's header: kernel_lacks).
pub(super) fn say_lacks(tool: &str) {
    let lacks = crate::kernel::Kernel::get().lacks();
    if !lacks.is_empty() {
        eprintln!("{tool}: this kernel ({}) has {}", crate::kernel::release(), lacks.join("; "));
    }
}

/// The kernel's mmap records, opened before the programs: the maps of the
/// first stacks' processes. `only`: the targets named by pid, whose maps
/// alone are taken (processes met later come with their fork records, or
/// are read from /proc as before).
pub(super) fn mmap_log(tool: &str, only: Option<&[u32]>) -> Option<MmapLog> {
    (std::env::var_os("WALLCLOCK_NO_MMAP_LOG").is_none())
        .then(|| MmapLog::open(only))
        .transpose()
        .inspect_err(|e| eprintln!("{tool}: warning: the kernel's mmap records (perf_event_open): {e}: maps are read from /proc alone, late for short processes"))
        .ok()
        .flatten()
}

/// The unwinder, reading `log`; `late`: the children of named targets
/// created while loading, whose maps the log is told of. With `spool`,
/// exited processes' Maps records go to a spool.
pub(super) fn unwinder(tool: &str, log: Option<MmapLog>, late: Option<&[u32]>, spool: bool) -> Unwind {
    let mut unwind = Unwind::new();
    if let Some(mut log) = log {
        if let Some(late) = late {
            log.synthesize(late.iter().copied());
        }
        unwind.use_log(log);
    }
    if spool {
        match crate::spool::Spool::new() {
            Ok(s) => unwind.spool_gone(s),
            Err(e) => eprintln!("{tool}: warning: {e}: exited processes' maps stay in memory until the stop"),
        }
    }
    unwind
}
