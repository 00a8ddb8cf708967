//! offcputime: off-CPU time per stack, split by thread state, and exact
//! on/off-CPU accounting per thread, from `sched_switch` (eBPF).
//!
//! Usage: `offcputime [-p PID] [-m MIN_US] [-d SECONDS] [-o FILE] [-- COMMAND ARGS]`
//!
//! Writes the wallclock stream (`Header`, `Maps`, `Thread`, `Stack` kind
//! `off` with `state`, `Stats`); `-f` writes bcc-style folded lines in µs.
//!
//! Accounting: every target thread's time in the window (clipped to its
//! life) is on-CPU (switch-in to switch-out) or off-CPU by the state it left
//! the CPU in (R preempted/runnable, S, D, other), so `on_ns + off_ns` is the
//! time alive. A block still open at the stop is closed there; a thread
//! blocked when the capture began is counted from the start, under the stack
//! read from `/proc/PID/task/TID/{syscall,stack}` and its user stack memory.
//! Every block keeps its stack and state, whatever its length: blocks are
//! summed in the kernel per (thread, stack, state). `-m` only says what the
//! stats count as a short block; `-M` and `--state` are filters the user
//! asks for, and the time they leave out stays in the thread's totals under
//! a named stack. Synthetic stacks: `[lost stack]` (no stack could be read:
//! every copy found the ring buffer full and the thread was no longer
//! blocked there at the stop, the map was full, or a switch was missed;
//! counted in `Stats`), `[filtered: over -M]`, `[filtered: --state]`,
//! `[thread start]` (a new thread waiting for its first run), `[before
//! exec]` (a launched command held until the capture was attached).
//!
//! Cost per context switch: no stack walk. A fingerprint of the user
//! registers, the top of the user stack and the syscall number names where a
//! thread blocks; only a fingerprint never seen before copies the stacks
//! (kernel stack, 16K of user stack) to user space, which unwinds them with
//! .eh_frame (framehop), so the caller of a libc function built without
//! frame pointers is kept. Blocks at the same place as the previous one are
//! summed in the thread's entry without a map update. Stack events are
//! drained by a thread of their own (`drain`) and unwound from its queue;
//! a copy that failed is tried again at the next block there, and a thread
//! still blocked at the stop under a stack never copied is read from /proc
//! (`atstop`).

mod atstop;
mod collect;
mod drain;
mod stacks;
mod skel {
    #![allow(clippy::all, unused, non_snake_case, non_camel_case_types)]
    include!(concat!(env!("OUT_DIR"), "/offcputime.skel.rs"));
}

use std::mem::MaybeUninit;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use wallclock_capture::target::{monotonic_ns, TargetArgs};
use wallclock_capture::event::{self, WcThread};
use wallclock_capture::{bpf, privs, session::Session, signal, tree, unwind::Unwind};

const EXAMPLES: &str = "EXAMPLES:
    offcputime -p 1234 10 > off.jsonl       # 10 s of process 1234
    offcputime -- ./server --port 80         # launch it, capture until it exits
    offcputime -m 1000 -p 1234 10            # stats count the time in blocks under 1 ms
    offcputime -M 1000000 -p 1234 10         # blocks over 1 s under [filtered: over -M]
    offcputime -p 1234 -f 5 > off.folded     # bcc-style folded lines (µs, hex addresses)
    offcputime -p 1234 -C 10                 # 1234 and every process it forks
    offcputime --cgroup /sys/fs/cgroup/system.slice/nginx.service 10
    offcputime -p 1234 | stacksym | flame > off.svg

DIFFERENCES FROM bcc's offcputime:
    Every block is kept under its stack and state whatever its length: blocks
    are summed in the kernel per thread, stack and state. bcc drops blocks
    under -m (default 1 µs) and over -M; here -m only sets what the stats
    count as short (short_blocks, short_blocks_ns, per state), and the time
    -M and --state leave out stays in the thread's totals under
    [filtered: over -M] and [filtered: --state], counted in the stats. Each
    thread's on-CPU + off-CPU time adds up to its time alive.";
/// Off-CPU time per stack and exact per-thread on/off-CPU time.
#[derive(Parser, Debug)]
#[command(name = "offcputime", version, after_help = EXAMPLES)]
pub struct Cli {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Blocks shorter than this (µs) are counted as short in the stats
    /// (count and time per state); they keep their stacks like any other
    /// block (bcc drops them).
    #[arg(short = 'm', long = "min-block-time", default_value_t = 1, value_name = "US")]
    pub min_block_us: u64,
    /// Blocks longer than this (µs) lose their stacks: their time stays in
    /// the thread's totals under `[filtered: over -M]` (bcc drops them).
    #[arg(short = 'M', long = "max-block-time", value_name = "US")]
    pub max_block_us: Option<u64>,
    /// Keep stacks only for blocks in this __state (0 runnable, 1 sleep, 2
    /// uninterruptible); the others' time stays in the thread's totals under
    /// `[filtered: --state]` (bcc drops it).
    #[arg(long = "state", value_name = "STATE", value_parser = clap::value_parser!(i64).range(0..))]
    pub state: Option<i64>,
    /// Distinct stacks remembered in the kernel (fingerprints).
    #[arg(long = "stack-storage-size", default_value_t = 16384, value_name = "N")]
    pub stack_storage_size: u32,
    /// Threads tracked at most.
    #[arg(long = "max-threads", default_value_t = 16384, value_name = "N")]
    pub max_threads: u32,
    /// Capture duration in seconds (same as -d).
    #[arg(value_name = "DURATION")]
    pub duration: Option<f64>,
    /// Command to launch and capture from its first instruction, with every
    /// process it starts (through fork, clone and exec); the capture ends
    /// when the command exits.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

fn load(cli: &Cli, sess: &Session, btf: bool) -> Result<skel::OffcputimeSkel<'static>, libbpf_rs::Error> {
    let open_object = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = skel::OffcputimeSkelBuilder::default().open(open_object)?;
    let ro = open.maps.rodata_data.as_deref_mut().expect("rodata");
    let f = sess.filter();
    ro.filter_tgid = f.filter_tgid;
    ro.single_tgid = f.single_tgid;
    ro.follow_children = f.follow;
    ro.filter_cgroup = f.cgroup.is_some();
    (ro.cgroup_id, ro.cgroup_level) = f.cgroup.unwrap_or((0, 0));
    ro.filter_tid = !cli.target.tids.is_empty();
    ro.thread_kind = cli.target.thread_kind();
    ro.want_ustack = !cli.target.kernel_stacks_only;
    ro.want_kstack = !cli.target.user_stacks_only;
    ro.min_block_ns = cli.min_block_us.saturating_mul(1000);
    ro.max_block_ns = cli.max_block_us.map_or(u64::MAX, |m| m.saturating_mul(1000));
    ro.state_filter = cli.state.unwrap_or(-1);
    open.maps.seen.set_max_entries(cli.stack_storage_size.max(64))?;
    open.maps.threads.set_max_entries(cli.max_threads.max(64))?;
    // Processes of a tree, at most as many as threads.
    open.maps.tgids.set_max_entries(cli.max_threads.max(1024))?;
    open.progs.fork_btf.set_autoload(f.follow && btf);
    open.progs.fork_raw.set_autoload(f.follow && !btf);
    open.progs.exec_btf.set_autoload(btf);
    open.progs.exec_raw.set_autoload(!btf);
    open.maps.events.set_max_entries(cli.target.ringbuf_mb << 20)?;
    open.maps.offcpu.set_max_entries(cli.stack_storage_size.max(64).saturating_mul(4))?;
    open.progs.switch_btf.set_autoload(btf);
    open.progs.switch_raw.set_autoload(!btf);
    open.load()
}

pub fn run(cli: Cli) -> Result<i32> {
    privs::check("offcputime")?;
    let mut sess = Session::prepare(&cli.target, cli.duration, &cli.command)?;
    signal::install();
    bpf::capture_log();
    let want_btf = std::env::var_os("WALLCLOCK_FORCE_RAW_TP").is_none();
    let (mut skel, btf) = match load(&cli, &sess, want_btf) {
        Ok(s) => (s, want_btf),
        Err(e) if want_btf => (load(&cli, &sess, false).map_err(|_| bpf::load_error("offcputime", e))?, false),
        Err(e) => return Err(bpf::load_error("offcputime", e)),
    };
    bpf::put_u32_set(&skel.maps.tgids, &sess.pids)?;
    bpf::put_u32_set(&skel.maps.tids, &cli.target.tids)?;
    let _link = if btf {
        skel.progs.switch_btf.attach()
    } else {
        skel.progs.switch_raw.attach()
    }
    .context("attaching to sched_switch")?;

    let _tree = attach_tree(&skel, btf, sess.follow)?;
    // Children of -p -C created while loading: the fork hook missed them.
    let late = sess.late_children();
    bpf::put_u32_set(&skel.maps.tgids, &late)?;
    let mut unwind = Unwind::new();
    let mut stacks = collect::Stacks::default();
    let drain = drain::Drain::start(libbpf_rs::MapHandle::try_from(&skel.maps.events)?)?;
    // Exec and fork markers travel in order with the stacks: the unwinder
    // follows each process's images.
    let event = |e: &[u8], stacks: &mut collect::Stacks, unwind: &mut Unwind| {
        if !tree::marker(e, unwind) {
            stacks.event(e, unwind);
        }
    };

    let start = monotonic_ns();
    let bss = skel.maps.bss_data.as_deref_mut().expect("bss");
    // SAFETY: bss is the program's mmapped .bss; the BPF side reads it.
    unsafe { std::ptr::write_volatile(&mut bss.start_ns, start) };
    if !late.is_empty() {
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(&mut bss.tree_grown, 1) };
    }
    sess.begin(start, &cli.target.tids, &mut unwind)?;

    while !sess.should_stop(|| bpf::u32_keys(&skel.maps.tgids)) {
        drain.work_for(Duration::from_millis(20), |e| event(e, &mut stacks, &mut unwind));
    }
    let end = monotonic_ns();
    // SAFETY: as above.
    unsafe { std::ptr::write_volatile(&mut bss.end_ns, end) };
    sess.stopped(bpf::u32_keys(&skel.maps.tgids));
    std::thread::sleep(Duration::from_millis(5));
    drain.finish(|e| event(e, &mut stacks, &mut unwind));

    let raw_threads = bpf::dump(&skel.maps.threads);
    sess.add_thread_pids(&raw_threads);
    let threads: Vec<(u32, WcThread)> = raw_threads
        .iter()
        .filter_map(|(k, v)| Some((u32::from_ne_bytes(k.get(..4)?.try_into().ok()?), event::from_bytes::<WcThread>(v)?)))
        .collect();
    let read_at_stop = atstop::read_missing(&threads, &mut stacks, &mut unwind);
    let offcpu = bpf::dump(&skel.maps.offcpu);
    let counts = bpf::percpu_sums(&skel.maps.stats, event::STAT_NAMES.len() as u32);
    let cfg = collect::Config {
        start,
        end,
        min_block_ns: cli.min_block_us.saturating_mul(1000),
        max_block_ns: cli.max_block_us.map_or(u64::MAX, |m| m.saturating_mul(1000)),
        state: cli.state.map(collect::state_of_raw),
        read_at_stop,
    };
    let records = collect::records(&cfg, &sess, &unwind, &stacks, &threads, &offcpu, &counts);

    let mut out = wallclock_stream::cli::open_output(cli.target.output.as_deref())?;
    // Folded lines are off-CPU time only, as bcc's: the thread's [steal]
    // (on-CPU time) stays in the stream.
    wallclock_capture::output::write(&mut out, &records, cli.target.folded, |s| {
        if s.kind == wallclock_stream::Kind::Off {
            s.ns / 1000
        } else {
            0
        }
    })?;
    drop(out);
    Ok(sess.finish())
}

/// The exec program of bpf/tree.bpf.h (the unwinder follows images), and
/// with a tree the fork program (new processes join the target).
fn attach_tree(skel: &skel::OffcputimeSkel<'static>, btf: bool, follow: bool) -> Result<Vec<libbpf_rs::Link>> {
    let exec = if btf { &skel.progs.exec_btf } else { &skel.progs.exec_raw };
    let mut links = vec![exec.attach().context("attaching to sched_process_exec")?];
    if follow {
        let fork = if btf { &skel.progs.fork_btf } else { &skel.progs.fork_raw };
        links.push(fork.attach().context("attaching to sched_process_fork")?);
    }
    Ok(links)
}
