//! The capture loop's turn, and the stop: what the loop does every 20 ms
//! until the session stops (the runtimes and samplers told of the
//! targets, exited threads retired, the tool's turn, the ring buffer
//! worked off, `--every`'s window cut when due), and the capture as it
//! is handed to the tool at the end.

use std::time::{Duration, Instant};

use anyhow::Result;
use libbpf_rs::Link;

use super::captured::Captured;
use super::live::{Live, Samplers};
use super::setup::secs_ns;
use super::skel::CaptureSkel;
use super::threads::{bpf_threads, Retired};
use super::tool::{Cut, Tool};
use crate::drain::Drain;
use crate::event;
use crate::session::Session;
use crate::target::{monotonic_ns, TargetArgs};
use crate::unwind::Unwind;
use crate::window::Windows;
use crate::bpf;

/// The loop's state between turns.
pub(super) struct Run<'a> {
    args: &'a TargetArgs,
    start: u64,
    /// The command is held until its exec, which opens its window.
    held: bool,
    pub deadline: Option<u64>,
    pub windows: Option<Windows>,
    pub retired: Retired,
    began: Instant,
}

impl<'a> Run<'a> {
    pub fn new(args: &'a TargetArgs, start: u64, held: bool, deadline: Option<u64>, windows: Option<Windows>) -> Self {
        Run { args, start, held, deadline, windows, retired: Retired::default(), began: Instant::now() }
    }

    /// One turn of the capture loop.
    pub fn turn<T: Tool>(&mut self, live: &mut Live<'_, T>, sess: &mut Session, skel: &mut T::Skel, drain: &Drain, samplers: &Samplers) -> Result<()> {
        live.refresh(sess, skel);
        samplers.targets(&sess.pids, || bpf::u32_keys(skel.maps().tgids));
        self.retired.turn(&skel.maps(), |dead| live.tool.retire(skel, dead));
        sess.settle_if_ready();
        live.tool.turn(skel, sess, &live.unwind)?;
        let (sent, handled) = drain.counts();
        live.unwind.reap(sent, handled);
        // -d of a held command counts from its exec, which opens its window.
        if let (None, true, Some(d), e @ 1..) = (self.deadline, self.held, sess.duration, skel.exec_ns()) {
            self.deadline = Some(e + secs_ns(d));
            skel.set_bss(None, self.deadline, false);
            sess.deadline = self.deadline;
        }
        // Not past the end of -d: the stop comes when the window closes.
        let turn = self.deadline.map_or(20_000_000, |d| d.saturating_sub(monotonic_ns()).min(20_000_000));
        drain.work_for(Duration::from_nanos(turn), |e| live.event(e));
        if self.began.elapsed() < Duration::from_secs(3) {
            // The stacks blocked at the start are still being unwound.
            live.unwind.trim_often();
        }
        self.cut(live, sess, skel, drain)
    }

    /// `--every`: the window closed when due. A cut due within half a
    /// window of the end of -d is left to the stop, which closes the last
    /// window: no sliver of a window after it.
    fn cut<T: Tool>(&mut self, live: &mut Live<'_, T>, sess: &mut Session, skel: &T::Skel, drain: &Drain) -> Result<()> {
        let args = self.args;
        let half = secs_ns(args.every.unwrap_or(0.0) / 2.0);
        let ends_soon = |sess: &Session| sess.deadline.is_some_and(|d| monotonic_ns() + half >= d);
        let due = self.windows.as_ref().and_then(|w| w.due(monotonic_ns()));
        let (Some(w), Some(cut_at)) = (self.windows.as_mut(), due.filter(|_| args.every_follow.is_some() || !ends_soon(sess))) else { return Ok(()) };
        // The stacks sent before the cut, so that its blocks have them.
        drain.work_for(Duration::from_millis(2), |e| live.event(e));
        sess.settle();
        // The kernel's sums are read now: a block or a running slice that
        // ended since `due` saw the time up is in them whole, so the
        // window ends now (cut when due, it was counted whole in the
        // earlier window: 118% of a thread's time in one window and 70% in
        // the next on a loaded machine). A follower keeps its leader's ends.
        let threads = self.retired.with(bpf_threads(&skel.maps()).1);
        let counts = bpf::percpu_sums(skel.maps().stats, event::STAT_NAMES.len() as u32);
        let cut_at = if args.every_follow.is_some() { cut_at } else { monotonic_ns().max(cut_at) };
        let machine = crate::steal::machine_ns();
        let fixed = args.every_follow.is_some();
        let cut = Cut { skel, sess, unwind: &live.unwind, start: self.start, end: cut_at, fixed, threads, counts };
        let Some((cut_at, recs)) = live.tool.snapshot(cut) else {
            anyhow::bail!("{}: --every is not supported", T::NAME);
        };
        w.close(cut_at, recs, false, machine)
    }
}

/// What the stop hands on: the window, the threads retired, the windows
/// of `--every`, the links (dropped once the counters are final).
pub(super) struct Stop {
    pub start: u64,
    pub end: u64,
    pub retired: Retired,
    pub windows: Option<Windows>,
    pub links: [Vec<Link>; 2],
}

impl Stop {
    /// The capture, once the ring buffer is drained: the unwinder's last
    /// words, the programs detached, the thread map and the counters read.
    pub fn captured<S: CaptureSkel>(self, tool: &'static str, skel: S, mut sess: Session, mut unwind: Unwind) -> Captured<S> {
        unwind.trim();
        if unwind.log_lost() > 0 {
            eprintln!("{tool}: warning: {} of the kernel's mmap records were lost (its buffer full): some short processes' frames may stay unnamed", unwind.log_lost());
        }
        for w in unwind.runtimes.advice() {
            eprintln!("{tool}: warning: {w}");
        }
        crate::bpfsyms::at_stop();
        drop(self.links);
        let (raw_threads, threads) = bpf_threads(&skel.maps());
        sess.add_thread_pids(&raw_threads);
        sess.add_pids(self.retired.pids.iter().copied());
        let threads = self.retired.with(threads);
        if std::env::var_os("WALLCLOCK_STEAL_STATS").is_some() {
            crate::steal::debug_sums(tool, &threads, sess.machine_steal);
        }
        sess.clocks_of_running(&threads);
        let counts = bpf::percpu_sums(skel.maps().stats, event::STAT_NAMES.len() as u32);
        Captured { tool, skel, sess, unwind, start: self.start, end: self.end, threads, counts, windows: self.windows }
    }
}
