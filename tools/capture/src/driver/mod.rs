//! The capture that offcputime and oncputime both run, from the checks to
//! the stop: the session, the BPF object loaded and attached (setup.rs),
//! the ring buffer drained by a thread of its own (`drain`) into the
//! unwinder and the tool (live.rs), the capture window written into .bss,
//! `--every`'s windows cut as it goes, the stop, the thread map
//! (threads.rs) and the counters. A tool brings only its BPF
//! configuration, its stack events and its records ([`Tool`]); its
//! skeleton reaches the maps and programs that capture.bpf.h and
//! tree.bpf.h give every capture program through
//! [`crate::capture_skel!`] (skel.rs).

mod captured;
mod live;
mod run;
mod setup;
mod skel;
mod threads;
mod tool;

use std::time::Duration;

use anyhow::Result;

pub use captured::{Captured, Request};
use live::{Live, Samplers};
use run::{Run, Stop};
use setup::secs_ns;
pub use skel::{object, CaptureSkel, Common, Maps, OpenCapture, TreeProg};
pub use threads::{bpf_threads, reborn_map, thread_map, Retired};
pub use tool::{Cut, Tool};

use crate::drain::Drain;
use crate::session::Session;
use crate::target::{monotonic_ns, TargetArgs};
use crate::{bpf, privs, signal};

/// Run a capture from the checks to the stop.
pub fn capture<T: Tool>(tool: &mut T, req: Request) -> Result<Captured<T::Skel>> {
    // The kernel's features, read from its BTF (40 ms) on a thread of their
    // own while the session is prepared: the load waits for them.
    std::thread::spawn(crate::kernel::Kernel::get);
    let args = req.target;
    // Resolved before anything is set up: a time in the past fails now.
    let schedule = args.when.schedule()?;
    privs::check(T::NAME)?;
    signal::install();
    crate::wait::prepare(T::NAME, &schedule)?;
    let mut sess = Session::prepare(args, req.duration, req.command)?;
    bpf::capture_log();
    let common = setup::common(&req, &sess);
    let (mut skel, btf) = setup::load(tool, &common)?;
    setup::say_lacks(T::NAME);
    // The command is its own from its exec: the wrapper's time before it
    // (our fork's copy of this process, a script's gate) is not captured.
    if let Some(pid) = sess.held_pid() {
        skel.hold(pid);
    }
    bpf::put_u32_set(skel.maps().tgids, &sess.pids)?;
    bpf::put_u32_set(skel.maps().tids, &args.tids)?;
    let only = (!sess.system_wide() && sess.cgroup.is_none()).then(|| sess.pids.clone());
    let log = setup::mmap_log(T::NAME, only.as_deref());
    let links = tool.attach(&skel, btf)?;
    let tree_links = setup::attach_tree(&skel, btf, sess.follow)?;
    crate::bpfsyms::at_attach();
    // Children of -p -C created while loading: the fork hook missed them.
    let late = sess.late_children();
    bpf::put_u32_set(skel.maps().tgids, &late)?;
    let unwind = setup::unwinder(T::NAME, log, only.is_some().then_some(&late[..]), req.spool_maps);
    let drain = Drain::start(libbpf_rs::MapHandle::try_from(skel.maps().events)?, common.ringbuf_bytes)?;
    let mut live = Live::new(tool, unwind, &skel)?;
    live.refresh(&sess, &skel);
    let samplers = Samplers::start(&*live.tool)?;
    // The window is written into the BPF side before it opens, with its
    // end when -d gives one: the programs count exactly [start, end),
    // however late this loop wakes for either (two captures given one
    // activation instant record the same interval). A held command's
    // window opens at its exec: -d counts from there (`turn`).
    let start = crate::wait::activation(T::NAME, &schedule, &args.when)?;
    let held = sess.held_pid().is_some();
    let deadline = sess.duration.filter(|_| !held).map(|d| start + secs_ns(d));
    skel.set_bss(Some(start), deadline, !late.is_empty());
    let boost = crate::wait::open(T::NAME, start, &schedule)?;
    drop(boost);
    setup::snapshot(&skel, || {
        drain.work_for(Duration::from_micros(500), |e| live.event(e));
        live.unwind.trim_often();
    })?;
    drain.bounded();
    sess.begin(start, &args.tids, &mut live.unwind)?;
    sess.deadline = deadline;
    let mut run = Run::new(args, start, held, deadline, windows(args, start, &sess));
    while !sess.should_stop(|| bpf::u32_keys(skel.maps().tgids)) {
        run.turn(&mut live, &mut sess, &mut skel, &drain, &samplers)?;
    }
    let Run { deadline, windows, retired, .. } = run;
    // The window closed at the end of -d, when that is what stopped it
    // (the BPF side stopped counting there); at once otherwise.
    let now = monotonic_ns();
    let end = deadline.filter(|&d| d <= now).unwrap_or(now);
    skel.set_bss(None, Some(end), false);
    samplers.finish(T::NAME);
    // The window opens at the held command's exec (when it came).
    let start = match skel.exec_ns() {
        0 => start,
        e => e.min(end),
    };
    sess.start_ns = start;
    sess.stopped(bpf::u32_keys(skel.maps().tgids));
    std::thread::sleep(Duration::from_millis(5));
    drain.finish(|e| live.event(e));
    let end = Stop { start, end, retired, windows, links: [links, tree_links] };
    Ok(end.captured(T::NAME, skel, sess, live.unwind))
}

/// `--every` (or `--every-follow`)'s windows, written under `-o`.
fn windows(args: &TargetArgs, start: u64, sess: &Session) -> Option<crate::window::Windows> {
    match (args.every, &args.every_follow, &args.output) {
        (Some(e), _, Some(o)) => Some(crate::window::Windows::new(e, o, start, sess.machine_steal.0)),
        (None, Some(l), Some(o)) => Some(crate::window::Windows::following(l, o, start, sess.machine_steal.0)),
        _ => None,
    }
}
