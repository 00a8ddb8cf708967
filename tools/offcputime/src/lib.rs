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
//! time alive. A block ends at its wake-up (`sched_waking`), not at the
//! next switch-in: what a woken thread then waits for a CPU is R under the
//! same stack. A block still open at the stop is closed there; a thread
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
//! `[thread start]` (a new thread waiting for its first run). A launched
//! command is captured from its exec: its wait before it is not its time.
//!
//! Cost per context switch: no stack walk. A fingerprint of the user
//! registers, the top of the user stack and the syscall number names where a
//! thread blocks; only a fingerprint never seen before copies the stacks
//! (kernel stack, 16K of user stack) to user space, which unwinds them with
//! .eh_frame (framehop), so the caller of a libc function built without
//! frame pointers is kept. Blocks at the same place as the previous one are
//! summed in the thread's entry without a map update. Stack events are
//! drained by a thread of their own (`wallclock_capture::drain`) and
//! unwound from its queue; a copy that failed is tried again at the next
//! block there, and a thread still blocked at the stop under a stack never
//! copied is read from /proc (`atstop`).
//!
//! `--wakers` (bpf/waker.bpf.h): at `sched_waking` the waker is current: a
//! thread (its stacks fingerprinted and copied as a blocked one's) or an
//! interrupt (preempt_count, read through the CPU's runqueue). The wake-up
//! waits per woken thread until its switch-in, where the closed block is
//! added under it to the `offwake` map: each (thread, stack, state) of
//! `offcpu` split by waker (`wakers`). With `--wake-depth`, the waker's
//! own last S/D block at the time it woke continues the chain.
//!
//! Memory (`early`): a thread's blocks are final once it has exited; its
//! records are made then, into a spool file the stop streams to the
//! output, and its stacks are dropped. Stacks are kept once per content
//! (`stacks`): a thread that blocks with a deadline on its stack has a
//! new fingerprint at each block, for the same stack.
//!
//! The capture itself (load, attach, window, stop) is the capture crate's
//! `driver`; this crate holds the BPF configuration and the records.

mod atstop;
mod blocks;
mod collect;
mod early;
mod recut;
mod stacks;
mod timeline;
mod wakers;
mod skel {
    #![allow(clippy::all, clippy::undocumented_unsafe_blocks, unused, non_snake_case, non_camel_case_types)]
    include!(concat!(env!("OUT_DIR"), "/offcputime.skel.rs"));
}

use anyhow::{Context, Result};
use clap::Parser;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use wallclock_capture::driver::{self, Common, OpenCapture, Request};
use wallclock_capture::target::TargetArgs;
use wallclock_capture::unwind::Unwind;
use wallclock_stream::Record;

wallclock_capture::capture_skel!(
    skel::OpenOffcputimeSkel<'static>,
    skel::OffcputimeSkel<'static>,
    skel::types::wc_thread
);

const EXAMPLES: &str = concat!(
    "EXAMPLES:
    offcputime -p 1234 10 > off.jsonl       # 10 s of process 1234
    offcputime -- ./server --port 80         # launch it, capture until it exits
    offcputime -m 1000 -p 1234 10            # stats count the time in blocks under 1 ms
    offcputime -M 1000000 -p 1234 10         # blocks over 1 s under [filtered: over -M]
    offcputime -p 1234 -f 5 > off.folded     # bcc-style folded lines (µs, named)
    offcputime -p 1234 -C 10                 # 1234 and every process it forks
    offcputime --cgroup /sys/fs/cgroup/system.slice/nginx.service 10
    offcputime -p 1234 | stacksym | flame > off.svg
    offcputime --wakers -p 1234 10 | stacksym | stackmerge --wakers --folded
                                             # each block with who woke it, and what that waker
                                             # waited on (--wake-depth 2, the default; 1: the waker only)

DIFFERENCES FROM bcc's offcputime:
    Every block is kept under its stack and state whatever its length: blocks
    are summed in the kernel per thread, stack and state. bcc drops blocks
    under -m (default 1 µs) and over -M; here -m only sets what the stats
    count as short (short_blocks, short_blocks_ns, per state), and the time
    -M and --state leave out stays in the thread's totals under
    [filtered: over -M] and [filtered: --state], counted in the stats. Each
    thread's on-CPU + off-CPU time adds up to its time alive. A block ends
    when its thread is woken: the wait for a CPU after that is runnable (R)
    under the same stack, where bcc counts it to the block.

MEMORY:
    The stack records of a thread that exits, and the Maps record of a
    process that exits, are made during the capture and kept in unlinked
    files in $TMPDIR (default /tmp) until the stop, which writes them to
    the output with its own: what the capture holds is bounded by the
    threads alive, not by how long it runs. Not with -f, --every,
    --wakers or --timeline, whose output needs every thread's blocks at
    the stop.

",
    wallclock_capture::files_of_the_target_help!()
);
/// Off-CPU time per stack and exact per-thread on/off-CPU time.
#[derive(Parser, Debug)]
#[command(name = "offcputime", version, after_help = EXAMPLES)]
pub struct Cli {
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub probe: wallclock_capture::probe::ProbeArgs,
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
    /// Record who woke each block (sched_waking): the waker thread and its
    /// stack, or `[timer]`, `[irq]`, `[softirq]`; each off-CPU stack
    /// record is split by waker (`stackmerge --wakers` shows them), and
    /// with --timeline each off-CPU slice carries its own waker.
    #[arg(long)]
    pub wakers: bool,
    /// With --wakers, follow a chain this many hops (default 2, as
    /// `wallclock --wake-depth`): 1 is the waker alone, as bcc's
    /// offwaketime shows it; 2 adds the waker's own last block before it
    /// woke (what the waker waited on); 3 that block's main waker, and so on.
    #[arg(long = "wake-depth", default_value_t = 2, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=8))]
    pub wake_depth: u32,
    /// Threads tracked at most.
    #[arg(long = "max-threads", default_value_t = 16384, value_name = "N")]
    pub max_threads: u32,
    /// Also keep the individual events with their times (a timeline):
    /// every running slice between switches and every block with its state
    /// and stack, as `slice` records (wallclock-stream(5)) for
    /// `wcexport --trace`. Bounded by a ring buffer of its own: what it
    /// drops is a counted gap in the timeline, never a loss in the sums.
    #[arg(long)]
    pub timeline: bool,
    /// With --timeline: blocks shorter than this (µs) are not events of
    /// their own; their time stays inside the running slice around them,
    /// counted there (short_blocks, short_ns).
    #[arg(long = "timeline-min", default_value_t = 0, value_name = "US", requires = "timeline")]
    pub timeline_min_us: u64,
    /// With --timeline: size of its ring buffer, MiB (a power of two).
    #[arg(long = "timeline-mb", default_value_t = 16, value_name = "MB", requires = "timeline")]
    pub timeline_mb: u32,
    /// Record no object per block (what each wait was for: the file,
    /// socket, lock or child; see wallclock-stream(5)'s `object`): the
    /// stack records then have none, and the capture reads no fd.
    #[arg(long = "no-objects")]
    pub no_objects: bool,
    /// Test of the stack fingerprints: copy the stack at every block and
    /// say on stderr how many copies found their fingerprint's stack
    /// already sent with another user or kernel stack (costly: a copy per
    /// context switch).
    #[arg(long = "check-fingerprints", hide = true)]
    pub check_fingerprints: bool,
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

/// offcputime's part of the capture: its rodata and maps, sched_switch,
/// the stacks of its fingerprints.
struct Off<'a> {
    cli: &'a Cli,
    /// The offcpu entries of exited threads, moved out of the map as the
    /// capture goes on (driver::Retired, driver/threads.rs).
    retired: Entries,
    stacks: collect::Stacks,
    /// --timeline's ring buffer consumer, from the attach to the stop.
    timeline: std::cell::RefCell<Option<timeline::Drain>>,
    /// --probe: the specs, and their ring buffer's consumer.
    probes: wallclock_capture::probe::Probes,
    probe_drain: std::cell::RefCell<Option<wallclock_capture::probe::Drain>>,
    probe_stacks: wallclock_capture::probe::Stacks,
    /// Exited threads written out during the capture (see `early`);
    /// None where the stop needs them all (folded lines, --every,
    /// --wakers, --timeline).
    early: Option<early::Early>,
    /// Names what each block waited on; scans the targets' fds once a
    /// second (`turn`), for the files closed before the stop.
    names: wallclock_capture::objects::Namer,
}

impl Off<'_> {
    fn load_with(&self, common: &Common, btf: bool, slot_cast: bool) -> Result<skel::OffcputimeSkel<'static>, libbpf_rs::Error> {
        let cli = self.cli;
        let mut open = skel::OffcputimeSkelBuilder::default().open(driver::object())?;
        open.common(common, btf)?;
        let ro = open.maps.rodata_data.as_deref_mut().expect("rodata");
        ro.slot_cast = slot_cast;
        ro.min_block_ns = cli.min_block_us.saturating_mul(1000);
        ro.max_block_ns = cli.max_block_us.map_or(u64::MAX, |m| m.saturating_mul(1000));
        ro.state_filter = cli.state.unwrap_or(-1);
        ro.snap_runnable = true;
        ro.fp_check = cli.check_fingerprints;
        ro.want_objects = !cli.no_objects;
        open.maps.seen.set_max_entries(cli.stack_storage_size.max(64))?;
        open.maps.offcpu.set_max_entries(cli.stack_storage_size.max(64).saturating_mul(4))?;
        ro.timeline_on = cli.timeline;
        ro.timeline_min_ns = cli.timeline_min_us.saturating_mul(1000);
        if cli.timeline {
            open.maps.timeline.set_max_entries(cli.timeline_mb << 20)?;
            open.maps.tl_threads.set_max_entries(cli.max_threads.max(64))?;
        } else {
            open.maps.tl_threads.set_max_entries(1)?;
        }
        open.progs.switch_btf.set_autoload(btf);
        open.progs.switch_raw.set_autoload(!btf);
        let probes = self.probes.any();
        ro.probes_on = probes;
        ro.spans_on = self.probes.spans();
        open.progs.wc_uprobe.set_autoload(probes);
        open.progs.wc_uretprobe.set_autoload(probes);
        open.progs.wc_usdt.set_autoload(probes);
        open.progs.wc_raw_tp.set_autoload(probes);
        open.progs.wc_tp.set_autoload(probes);
        if probes {
            open.maps.probe_events.set_max_entries(4 << 20)?;
        }
        if self.probes.spans() {
            open.maps.span_stacks.set_max_entries(cli.max_threads.max(64))?;
        }
        ro.want_wakers = cli.wakers;
        if cli.wakers {
            ro.preempt_from_rq = wakers::preempt_from_rq().unwrap_or(0);
        }
        // Always: sched_waking stamps each block's end (its wake-up), so
        // the wait for a CPU after it is runnable; --wakers adds who woke it.
        open.progs.waking_btf.set_autoload(btf);
        open.progs.waking_raw.set_autoload(!btf);
        if !cli.wakers {
            open.maps.offwake.set_max_entries(1)?;
            open.maps.wakes.set_max_entries(1)?;
        } else {
            open.maps.offwake.set_max_entries(cli.stack_storage_size.max(64).saturating_mul(4))?;
            open.maps.wakes.set_max_entries(cli.max_threads.max(64))?;
        }
        open.load()
    }
}

impl driver::Tool for Off<'_> {
    type Skel = skel::OffcputimeSkel<'static>;
    const NAME: &'static str = "offcputime";

    fn load(&self, common: &Common, btf: bool) -> Result<Self::Skel, libbpf_rs::Error> {
        // The file table's slot is read through bpf_rdonly_cast to void
        // where the verifier allows it (6.18; 6.12 refuses it): else by a
        // helper (bpf/fingerprint.bpf.h).
        let mark = wallclock_capture::bpf::log_mark();
        match self.load_with(common, btf, true) {
            Err(_) if btf && wallclock_capture::bpf::log_mentions_since(mark, "bpf_rdonly_cast") => self.load_with(common, btf, false),
            r => r,
        }
    }

    fn attach(&self, skel: &Self::Skel, btf: bool) -> Result<Vec<libbpf_rs::Link>> {
        if self.cli.timeline {
            let map = libbpf_rs::MapHandle::try_from(&skel.maps.timeline)?;
            *self.timeline.borrow_mut() = Some(timeline::Drain::start(map)?);
        }
        let mut links = Vec::new();
        if self.probes.any() {
            let map = libbpf_rs::MapHandle::try_from(&skel.maps.probe_events)?;
            *self.probe_drain.borrow_mut() = Some(wallclock_capture::probe::Drain::start(map, "offcputime", &self.probes.specs)?);
            let progs = wallclock_capture::probe::Progs {
                uprobe: &skel.progs.wc_uprobe,
                uretprobe: &skel.progs.wc_uretprobe,
                usdt: &skel.progs.wc_usdt,
                raw_tp: &skel.progs.wc_raw_tp,
                tp: &skel.progs.wc_tp,
                tp_fields: &skel.maps.tp_fields,
            };
            links.extend(wallclock_capture::probe::attach(&self.probes, &progs)?);
        }
        let switch = if btf { &skel.progs.switch_btf } else { &skel.progs.switch_raw };
        links.push(switch.attach().context("attaching to sched_switch")?);
        let waking = if btf { &skel.progs.waking_btf } else { &skel.progs.waking_raw };
        links.push(waking.attach().context("attaching to sched_waking")?);
        Ok(links)
    }

    fn event(&mut self, data: &[u8], unwind: &mut Unwind) {
        if self.probe_stacks.event(data, unwind) {
            return;
        }
        if let Some(e) = self.early.as_mut() {
            e.event();
        }
        self.stacks.event(data, unwind);
    }

    fn retire(&mut self, skel: &Self::Skel, dead: &[(u32, wallclock_capture::event::WcThread)]) -> bool {
        use libbpf_rs::MapCore;
        let tids: std::collections::HashSet<u32> = dead.iter().map(|(t, _)| *t).collect();
        let map = &skel.maps.offcpu;
        // Only their entries are read: a copy of the whole map (65536
        // entries) every second was 10 MB of the capture's peak.
        let theirs = |k: &[u8]| wallclock_capture::event::from_bytes::<wallclock_capture::event::WcOkey>(k).is_some_and(|k| tids.contains(&k.key()));
        let gone: Entries = map
            .keys()
            .filter(|k| theirs(k))
            .filter_map(|k| Some((k.clone(), map.lookup(&k, libbpf_rs::MapFlags::ANY).ok()??)))
            .collect();
        for (k, _) in &gone {
            let _ = map.delete(k);
        }
        match self.early.as_mut() {
            Some(e) => {
                e.retire(dead, gone);
                true
            }
            None => {
                self.retired.extend(gone);
                false
            }
        }
    }

    fn turn(&mut self, skel: &Self::Skel, sess: &wallclock_capture::session::Session, unwind: &Unwind) -> Result<()> {
        use libbpf_rs::MapCore;
        if !self.cli.no_objects {
            self.names.scan(sess.pids.iter().copied());
        }
        for fp in self.stacks.newly_stale(unwind) {
            let _ = skel.maps.seen.delete(&fp.to_ne_bytes());
        }
        let Some(early) = self.early.as_mut() else { return Ok(()) };
        // The stacks of the threads blocked at the start are part of it.
        if !sess.settled() {
            return Ok(());
        }
        let cfg = config(self.cli, sess.start_ns, u64::MAX, 0);
        let new_stacks = || {
            let names = &wallclock_capture::event::STAT_NAMES;
            let i = names.iter().position(|n| *n == "new_stacks").unwrap_or(0);
            wallclock_capture::bpf::percpu_sums(&skel.maps.stats, names.len() as u32)[i]
        };
        for fp in early.turn(new_stacks, &cfg, sess, unwind, &mut self.stacks, &self.names)? {
            let _ = skel.maps.seen.delete(&fp.to_ne_bytes());
        }
        Ok(())
    }

    fn snapshot(&mut self, cut: driver::Cut<'_, Self::Skel>) -> Option<(u64, Vec<Record>)> {
        // The sums first, then the threads' pending blocks: a block that
        // moves from one to the other in between is then missed by this
        // cut (and counted by the next), never counted twice (a window
        // cannot give time back).
        let (mut offcpu, offwake) = dump_off(cut.skel, self.cli.wakers);
        offcpu.extend(self.retired.iter().cloned());
        let (_, mut threads) = driver::thread_map(&cut.skel.maps.threads);
        let live: std::collections::HashSet<u32> = threads.iter().map(|(t, _)| *t).collect();
        // The exited threads moved out of the map (their entries are final).
        threads.extend(cut.threads.iter().filter(|(t, th)| th.exit_ns != 0 && !live.contains(t)).copied());
        // The thread map was read after the cut's end: the time it counts
        // past that end is this window's, so the window ends after it.
        let end = cut.end_after_reads();
        let cfg = config(self.cli, cut.start, end, 0);
        let done = collect::Done::default();
        let inp = collect::Input {
            cfg: &cfg,
            sess: cut.sess,
            unwind: cut.unwind,
            stacks: &self.stacks,
            threads: &threads,
            offcpu: &offcpu,
            offwake: &offwake,
            names: &self.names,
            counts: &cut.counts,
            done: &done,
        };
        Some((end, collect::records_vec(&inp)))
    }
}

fn config(cli: &Cli, start: u64, end: u64, read_at_stop: u64) -> collect::Config {
    collect::Config {
        start,
        end,
        min_block_ns: cli.min_block_us.saturating_mul(1000),
        max_block_ns: cli.max_block_us.map_or(u64::MAX, |m| m.saturating_mul(1000)),
        state: cli.state.map(collect::state_of_raw),
        read_at_stop,
        wake_depth: cli.wakers.then_some(cli.wake_depth),
    }
}

/// A BPF map's entries, as (key, value) bytes.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// The off-CPU sums, by stack and, with --wakers, by waker.
fn dump_off(skel: &skel::OffcputimeSkel<'_>, wakers: bool) -> (Entries, Entries) {
    let offcpu = wallclock_capture::bpf::dump(&skel.maps.offcpu);
    let offwake = if wakers { wallclock_capture::bpf::dump(&skel.maps.offwake) } else { Vec::new() };
    (offcpu, offwake)
}

/// What the end of a capture says on stderr when time went to `[lost
/// stack]`, as bcc says "WARNING: N stack traces lost and could not be
/// displayed": how many blocks, how much time, and the flag that helps.
pub fn lost_warning(c: &std::collections::BTreeMap<String, u64>) -> Option<String> {
    let get = |k: &str| c.get(k).copied().unwrap_or(0);
    let (n, ns) = (get("lost_stacks"), get("lost_stack_ns"));
    if n == 0 {
        return None;
    }
    let mut why = Vec::new();
    if get("map_full") > 0 {
        why.push(format!("the stack map was full {} times: raise --stack-storage-size", get("map_full")));
    }
    if get("ringbuf_drops") > 0 {
        why.push(format!("the ring buffer was full {} times: raise --ringbuf-mb", get("ringbuf_drops")));
    }
    if get("missed_switches") > 0 {
        why.push(format!("{} context switches were not seen", get("missed_switches")));
    }
    let why = if why.is_empty() { String::new() } else { format!(" ({})", why.join("; ")) };
    Some(format!("{n} blocks, {:.3} s off-CPU, kept no stack: [lost stack]{why}", ns as f64 / 1e9))
}

/// What the probes could not record, said at the end with what helps
/// (the counts are in the stream's trailer too). Exits whose entry came
/// before the window are not losses: that span did not open in it.
fn probe_loss_warnings(counts: &[(String, u64)]) -> Vec<String> {
    let n = |k: &str| counts.iter().find(|(name, _)| name == k).map_or(0, |(_, v)| *v);
    let mut w = Vec::new();
    if n("probe_drops") > 0 {
        w.push(format!(
            "{} probe events (spans or events) not recorded: the probe ring buffer was full, its reader behind; capture for less time (-d) or probe a less frequent point",
            n("probe_drops")
        ));
    }
    if n("probe_map_full") > 0 {
        w.push(format!("{} spans not recorded: more threads opened spans than the span table holds; raise --max-threads", n("probe_map_full")));
    }
    if n("probe_spans_too_deep") > 0 {
        w.push(format!(
            "{} span entries not recorded: a thread had 8 spans open already (exits not seen close no level: a longjmp or an exception past a uprobe's return); probe points whose exit always fires",
            n("probe_spans_too_deep")
        ));
    }
    w
}

pub fn run(cli: Cli) -> Result<i32> {
    if cli.timeline && (!cli.timeline_mb.is_power_of_two() || cli.timeline_mb > 1024) {
        anyhow::bail!("--timeline-mb must be a power of two up to 1024, got {}", cli.timeline_mb);
    }
    let probes = wallclock_capture::probe::Probes::new(&cli.probe, &cli.command, &cli.target.pids)?;
    let mut off = Off {
        cli: &cli,
        retired: Vec::new(),
        stacks: collect::Stacks::checking(cli.check_fingerprints),
        timeline: Default::default(),
        probes,
        probe_drain: Default::default(),
        probe_stacks: Default::default(),
        early: None,
        names: Default::default(),
    };
    let t = &cli.target;
    if !t.folded && t.every.is_none() && t.every_follow.is_none() && !cli.wakers && !cli.timeline {
        match early::Early::new() {
            Ok(e) => off.early = Some(e),
            Err(e) => eprintln!("offcputime: warning: {e:#}: exited threads stay in memory until the stop"),
        }
    }
    let req = Request { target: &cli.target, duration: cli.duration, command: &cli.command, max_threads: cli.max_threads, blocked_stacks: true, spool_maps: off.early.is_some() };
    let mut cap = driver::capture(&mut off, req)?;
    let tl_events = off.timeline.take().map(timeline::Drain::finish);
    let probe_events = off.probe_drain.take().map(wallclock_capture::probe::Drain::finish);
    let early = off.early.take().map(early::Early::finish);
    let mut stacks = off.stacks;
    let mut threads = cap.threads.clone();
    let (mut offcpu, offwake) = dump_off(&cap.skel, cli.wakers);
    offcpu.append(&mut off.retired);
    let (done, mut spool) = match early {
        Some(f) => {
            // Retired threads not written out yet are the stop's.
            threads.extend(f.threads);
            offcpu.extend(f.entries);
            (f.done, Some(f.spool))
        }
        None => (collect::Done::default(), None),
    };
    let read_at_stop = atstop::read_missing(&threads, &mut stacks, &mut cap.unwind);
    // Every process exit so far, for the generations of reused pids.
    cap.unwind.sync_log();
    let cfg = config(&cli, cap.start, cap.end, read_at_stop);
    let inp = collect::Input {
        cfg: &cfg,
        sess: &cap.sess,
        unwind: &cap.unwind,
        stacks: &stacks,
        threads: &threads,
        offcpu: &offcpu,
        offwake: &offwake,
        names: &off.names,
        counts: &cap.counts,
        done: &done,
    };
    // Into the spool with the exited threads' records, when there is
    // one: streamed from there to the output after the others, before
    // the trailer (and the timeline's and probes' records below).
    let mut records = match spool.as_mut() {
        Some(sp) => collect::records(&inp, &mut |s| sp.push(&Record::Stack(s))).context("writing the spool of off-CPU stack records (in TMPDIR)")?,
        None => collect::records_vec(&inp),
    };
    drop(offcpu);
    let at = records.len() - 1;
    if let Some(events) = tl_events {
        add_timeline(&mut records, &cap, &cfg, &stacks, &threads, events, &off.names);
    }
    if let Some(events) = probe_events {
        let counts = wallclock_capture::bpf::percpu_sums(&cap.skel.maps.probe_stats, wallclock_capture::event::PROBE_STAT_NAMES.len() as u32);
        let (recs, pcounts) = wallclock_capture::probe::records(&off.probes, events, &off.probe_stacks, &counts);
        for w in probe_loss_warnings(&pcounts) {
            eprintln!("offcputime: warning: {w}");
        }
        before_trailer(&mut records, recs, pcounts);
    }
    cap.sess.cap_steal(&mut records);
    if let Some(c) = stacks.check() {
        eprintln!("offcputime: {c}");
    }
    if let Some(Record::Stats(st)) = records.last() {
        if let Some(w) = lost_warning(&st.counts) {
            eprintln!("offcputime: warning: {w}");
        }
    }
    // Folded lines are off-CPU time only, as bcc's: the thread's [steal]
    // (on-CPU time) stays in the stream.
    let value = |s: &wallclock_stream::Stack| if s.kind == wallclock_stream::Kind::Off { s.ns / 1000 } else { 0 };
    // Exited processes' Maps records after the header, before the others.
    let mut splices = Vec::new();
    if let Some(maps) = cap.unwind.take_gone_spool() {
        splices.push((1, maps.read()?));
    }
    if let Some(spool) = spool {
        splices.push((at, spool.read()?));
    }
    cap.write_spliced(&cli.target, &records, splices, value)
}

/// `--timeline`'s records, before the trailer, which gets the timeline's
/// counts. With `--wakers` (`cfg.wake_depth`), wakers are named from the
/// thread records; each block's object by `objects`.
fn add_timeline(
    records: &mut Vec<Record>,
    cap: &wallclock_capture::driver::Captured<skel::OffcputimeSkel<'static>>,
    cfg: &collect::Config,
    stacks: &collect::Stacks,
    threads: &[(u32, wallclock_capture::event::WcThread)],
    events: Vec<wallclock_capture::event::WcTlEvent>,
    objects: &wallclock_capture::objects::Namer,
) {
    let tl_threads = wallclock_capture::bpf::dump(&cap.skel.maps.tl_threads)
        .iter()
        .filter_map(|(k, v)| {
            let tid = u32::from_ne_bytes(k.get(..4)?.try_into().ok()?);
            Some((tid, wallclock_capture::event::from_bytes(v)?))
        })
        .collect();
    let counts = wallclock_capture::bpf::percpu_sums(&cap.skel.maps.tl_stats, wallclock_capture::event::TL_STAT_NAMES.len() as u32);
    let names: std::collections::HashMap<u32, (u32, String)> = records
        .iter()
        .filter_map(|r| match r {
            Record::Thread(t) => Some((t.tid, (t.pid, t.comm.clone()))),
            _ => None,
        })
        .collect();
    let thread_of = |tid: u32| names.get(&tid).cloned();
    let thread: Option<&dyn Fn(u32) -> Option<(u32, String)>> = cfg.wake_depth.is_some().then_some(&thread_of as _);
    let comm_of = |tid: u32| names.get(&tid).map(|(_, c)| c.clone());
    let inp = timeline::Input { cfg, sess: &cap.sess, stacks, threads, events, tl_threads, thread, names: objects, comm_of: &comm_of };
    let (tl, tl_counts) = timeline::records(&inp, &counts);
    before_trailer(records, tl, tl_counts);
}

/// `recs` put before the trailer (the last record), whose counts get
/// `counts`.
fn before_trailer(records: &mut Vec<Record>, recs: Vec<Record>, counts: impl IntoIterator<Item = (String, u64)>) {
    let trailer = records.pop();
    records.extend(recs);
    if let Some(Record::Stats(mut s)) = trailer {
        s.counts.extend(counts);
        records.push(Record::Stats(s));
    }
}
