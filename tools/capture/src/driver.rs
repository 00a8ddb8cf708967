//! The capture that offcputime and oncputime both run: load the BPF object
//! (tp_btf, or raw_tp where tp_btf is refused), the target filter and map
//! sizes of capture.bpf.h, attach, the ring buffer drained by a thread of
//! its own (`drain`), the capture window written into .bss, the stop, the
//! thread map and the counters. A tool brings only its BPF configuration,
//! its stack events and its records ([`Tool`]); its skeleton reaches the
//! maps and programs that capture.bpf.h and tree.bpf.h give every capture
//! program through [`crate::capture_skel!`].

use std::time::Duration;

use anyhow::{Context, Result};
use libbpf_rs::{Link, MapMut, ProgramMut};
use wallclock_stream::Record;

use crate::drain::Drain;
use crate::event::{self, WcThread};
use crate::runtimes::BpfMaps;
use crate::session::{Filter, Session};
use crate::target::{monotonic_ns, TargetArgs};
use crate::unwind::Unwind;
use crate::{bpf, privs, signal, tree};

/// What every capture program is told before load (capture.bpf.h's
/// rodata, the sizes of its maps).
#[derive(Debug, Clone, Copy)]
pub struct Common {
    pub filter: Filter,
    pub filter_tid: bool,
    pub thread_kind: i32,
    pub want_ustack: bool,
    pub want_kstack: bool,
    /// The task iterator at the start also sends the stacks of the
    /// threads blocked then (bpf/snapshot.bpf.h): system-wide offcputime.
    pub snap_stacks: bool,
    pub max_threads: u32,
    pub ringbuf_bytes: u32,
}

/// The maps of capture.bpf.h.
pub struct Maps<'a> {
    pub events: &'a MapMut<'static>,
    pub tgids: &'a MapMut<'static>,
    pub tids: &'a MapMut<'static>,
    pub threads: &'a MapMut<'static>,
    pub reborn: &'a MapMut<'static>,
    pub stats: &'a MapMut<'static>,
    pub py_threads: &'a MapMut<'static>,
    pub py_cfg: &'a MapMut<'static>,
    pub rb_cfg: &'a MapMut<'static>,
    pub rt_gen: &'a MapMut<'static>,
}

/// The programs of tree.bpf.h.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeProg {
    Exec,
    Fork,
}

/// An opened (not yet loaded) capture skeleton.
pub trait OpenCapture {
    /// Write capture.bpf.h's rodata, size its maps, and choose the
    /// flavour (tp_btf or raw_tp) of tree.bpf.h's programs.
    fn common(&mut self, c: &Common, btf: bool) -> Result<(), libbpf_rs::Error>;
}

/// A loaded capture skeleton.
pub trait CaptureSkel {
    fn maps(&self) -> Maps<'_>;
    /// The task iterator of snapshot.bpf.h.
    fn snapshot_prog(&self) -> &ProgramMut<'static>;
    fn tree_prog(&self, which: TreeProg, btf: bool) -> &ProgramMut<'static>;
    /// Write .bss: the window's start and end, and `tree_grown`.
    fn set_bss(&mut self, start_ns: Option<u64>, end_ns: Option<u64>, tree_grown: bool);
    /// This process is held until its exec: no target before then.
    fn hold(&mut self, tgid: u32);
    /// When the held process exec'd (0: not yet).
    fn exec_ns(&self) -> u64;
}

/// What differs between the capture tools.
pub trait Tool {
    type Skel: CaptureSkel;
    /// The tool's name, for errors.
    const NAME: &'static str;
    /// Open the skeleton (its object from [`object`]), call
    /// [`OpenCapture::common`], set the tool's own rodata, sizes and
    /// autoloads, load.
    fn load(&self, common: &Common, btf: bool) -> Result<Self::Skel, libbpf_rs::Error>;
    /// Attach the tool's own programs; the links last until the stop.
    fn attach(&self, skel: &Self::Skel, btf: bool) -> Result<Vec<Link>>;
    /// One stack event of the ring buffer (possibly without the unread
    /// tail of its user-stack copy: read it with `WcEvent::parse`).
    fn event(&mut self, data: &[u8], unwind: &mut Unwind);
    /// `--every`: the records of the capture from its start to its end (at
    /// least `end`, see [`Cut::end_after_reads`]), as at a stop there,
    /// while it goes on, with that end; None when the tool has no windows.
    fn snapshot(&mut self, _cut: Cut<'_, Self::Skel>) -> Option<(u64, Vec<Record>)> {
        None
    }
    /// These threads exited and their entries leave the thread map (see
    /// [`Retired`]): move the tool's own map entries of theirs out too.
    /// True: the tool keeps the threads itself (and gives them back at
    /// the stop, those it has not written out), the capture only their pids.
    fn retire(&mut self, _skel: &Self::Skel, _dead: &[(u32, WcThread)]) -> bool {
        false
    }
    /// A turn of the capture loop, with the session and the unwinder as
    /// they are: a tool may write out what is final (offcputime's exited
    /// threads) instead of holding it until the stop.
    fn turn(&mut self, _skel: &Self::Skel, _sess: &Session, _unwind: &Unwind) -> Result<()> {
        Ok(())
    }
    /// `--goroutines FILE`: sample the Go targets' goroutines at this rate
    /// into FILE (crate::goroutines).
    fn goroutines(&self) -> Option<(u64, std::path::PathBuf)> {
        None
    }
    /// `--tasks FILE`: the same for asyncio tasks (crate::asyncio).
    fn tasks(&self) -> Option<(u64, std::path::PathBuf)> {
        None
    }
}

/// Threads that exited, moved out of the BPF thread map as the capture
/// goes on (once a second): a busy machine's or a build's short-lived
/// processes would otherwise fill the map (16384 entries: a parallel build
/// starts that many threads in about a minute) and every later thread's
/// time would be lost. An exited thread's entry is final, so it is read
/// once and kept here, and its tid may be used again.
#[derive(Default)]
pub struct Retired {
    pub threads: Vec<(u32, WcThread)>,
    /// The processes of every thread retired (the header's pids).
    pub pids: std::collections::BTreeSet<u32>,
    last: Option<std::time::Instant>,
}

impl Retired {
    fn turn<T: Tool>(&mut self, tool: &mut T, skel: &T::Skel) {
        if self.last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            return;
        }
        self.last = Some(std::time::Instant::now());
        give_back_heap();
        let maps = skel.maps();
        let (_, threads) = thread_map(maps.threads);
        let mut dead = Vec::new();
        for (key, th) in threads.into_iter().filter(|(_, t)| t.exit_ns != 0) {
            // Taken out as it is now: a new thread given the tid since it
            // was read has moved it to `reborn` (it is read from there)
            // and has its own entry here, which goes back.
            let tid = event::real_tid(key).to_ne_bytes();
            let v = match libbpf_rs::MapCore::lookup_and_delete(maps.threads, &tid) {
                Ok(Some(v)) => v,
                Ok(None) => continue,
                // A kernel without the command for hash maps (before
                // 5.14): taken as read.
                Err(_) => {
                    let _ = libbpf_rs::MapCore::delete(maps.threads, &tid);
                    dead.push((key, th));
                    continue;
                }
            };
            match event::from_bytes::<WcThread>(&v) {
                Some(th) if th.exit_ns != 0 => dead.push((key, th)),
                _ => {
                    let _ = libbpf_rs::MapCore::update(maps.threads, &tid, &v, libbpf_rs::MapFlags::NO_EXIST);
                }
            }
        }
        let (raw, reborn) = reborn_map(maps.reborn);
        for (k, _) in &raw {
            let _ = libbpf_rs::MapCore::delete(maps.reborn, k);
        }
        dead.extend(reborn);
        if dead.is_empty() {
            return;
        }
        let taken = tool.retire(skel, &dead);
        self.pids.extend(dead.iter().map(|(_, t)| t.pid));
        if !taken {
            self.threads.extend(dead);
        }
    }

    /// The thread map now with the retired threads.
    fn with(&self, mut live: Vec<(u32, WcThread)>) -> Vec<(u32, WcThread)> {
        live.extend(self.threads.iter().copied());
        live
    }
}

/// Return the free pages of the heap to the kernel, once a second. The
/// drain thread allocates each stack event and the main thread frees it
/// (a burst of first stacks queues megabytes: 2,500 threads blocked at the
/// start of a system-wide capture, a build's new processes), and glibc
/// keeps what is freed in the drain thread's arena: the capture's
/// resident memory stayed at its highest queue ever, 20-40 MB above what
/// it held. malloc_trim also releases free pages inside the arenas.
fn give_back_heap() {
    // SAFETY: malloc_trim only walks and madvises glibc's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// What a tool's [`Tool::snapshot`] reads: the capture so far.
pub struct Cut<'a, S> {
    pub skel: &'a S,
    pub sess: &'a Session,
    pub unwind: &'a Unwind,
    pub start: u64,
    /// Where the window ends, read after `threads` and `counts`. A tool
    /// that reads more of the BPF side's sums after it (offcputime's
    /// thread map) moves the end to after its last read, unless the end
    /// is `fixed` (a follower's: its leader's end).
    pub end: u64,
    pub fixed: bool,
    pub threads: Vec<(u32, WcThread)>,
    pub counts: Vec<u64>,
}

impl<S> Cut<'_, S> {
    /// The window's end for sums read until now: `end`, or now if later
    /// and the end is not fixed. Time counted after the end would be
    /// counted in this window and taken back from the next (a thread's
    /// interval read at 105% of it in a slow guest, then short).
    pub fn end_after_reads(&self) -> u64 {
        if self.fixed {
            self.end
        } else {
            self.end.max(monotonic_ns())
        }
    }
}

/// A map's entries as bytes: (key, value).
type RawEntries = Vec<(Vec<u8>, Vec<u8>)>;

/// The thread map: each thread's key ([`event::thread_key`]: its tid
/// unless it is a later thread of a tid used again) and the BPF side's
/// accounting.
pub fn thread_map(map: &MapMut<'static>) -> (RawEntries, Vec<(u32, WcThread)>) {
    threads_of(map, |k| Some(u32::from_ne_bytes(k.get(..4)?.try_into().ok()?)))
}

/// The `reborn` map: final entries of threads whose tid a new thread
/// took before they were retired (bpf/capture.bpf.h, thread_reborn), by
/// thread key. Its key holds the tid in its low 32 bits.
pub fn reborn_map(map: &MapMut<'static>) -> (RawEntries, Vec<(u32, WcThread)>) {
    threads_of(map, |k| Some(u64::from_ne_bytes(k.get(..8)?.try_into().ok()?) as u32))
}

/// A map of thread entries, by thread key: `tid_of` reads a key's tid.
fn threads_of(map: &MapMut<'static>, tid_of: impl Fn(&[u8]) -> Option<u32>) -> (RawEntries, Vec<(u32, WcThread)>) {
    let raw = bpf::dump(map);
    let threads = raw
        .iter()
        .filter_map(|(k, v)| {
            let th = event::from_bytes::<WcThread>(v)?;
            Some((event::thread_key(tid_of(k)?, th.tgen), th))
        })
        .collect();
    (raw, threads)
}

/// Every thread BPF holds: the thread map's and the `reborn` map's.
pub fn bpf_threads(maps: &Maps<'_>) -> (RawEntries, Vec<(u32, WcThread)>) {
    let (mut raw, mut threads) = thread_map(maps.threads);
    let (rraw, reborn) = reborn_map(maps.reborn);
    raw.extend(rraw);
    threads.extend(reborn);
    (raw, threads)
}

/// Storage for a skeleton's object: skeletons borrow it for as long as
/// the process runs.
pub fn object() -> &'static mut std::mem::MaybeUninit<libbpf_rs::OpenObject> {
    Box::leak(Box::new(std::mem::MaybeUninit::uninit()))
}

/// What the capture command line asks for.
pub struct Request<'a> {
    pub target: &'a TargetArgs,
    /// The positional duration, beside `-d`.
    pub duration: Option<f64>,
    pub command: &'a [String],
    pub max_threads: u32,
    /// Whether the tool wants the stacks of the threads blocked at the
    /// start from the iterator when there is no target (offcputime).
    pub blocked_stacks: bool,
    /// The Maps records of exited processes into a spool as they are
    /// forgotten ([`Unwind::take_gone_spool`]), for a tool that streams
    /// its output from it.
    pub spool_maps: bool,
}

/// A finished capture, for the tool to turn into records.
pub struct Captured<S> {
    /// The tool's name, for warnings.
    pub tool: &'static str,
    pub skel: S,
    pub sess: Session,
    pub unwind: Unwind,
    pub start: u64,
    pub end: u64,
    /// The thread map: tid and the BPF side's accounting.
    pub threads: Vec<(u32, WcThread)>,
    /// The `stats` counters, indexed as [`event::STAT_NAMES`].
    pub counts: Vec<u64>,
    /// `--every`: the windows closed so far; the last one closes with
    /// [`Captured::write`].
    pub windows: Option<crate::window::Windows>,
}

fn load<T: Tool>(tool: &T, common: &Common) -> Result<(T::Skel, bool)> {
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
fn attach_tree(skel: &impl CaptureSkel, btf: bool, follow: bool) -> Result<Vec<Link>> {
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
fn snapshot(skel: &impl CaptureSkel, mut wait: impl FnMut()) -> Result<()> {
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
fn secs_ns(secs: f64) -> u64 {
    (secs * 1e9).round() as u64
}

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
    let common = Common {
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
    };
    let (mut skel, btf) = load(tool, &common)?;
    // Once, what this kernel cannot give and what is done instead (also in
    // the stream's header: kernel_lacks).
    let lacks = crate::kernel::Kernel::get().lacks();
    if !lacks.is_empty() {
        eprintln!("{}: this kernel ({}) has {}", T::NAME, crate::kernel::release(), lacks.join("; "));
    }
    // The command is its own from its exec: the wrapper's time before it
    // (our fork's copy of this process, a script's gate) is not captured.
    if let Some(pid) = sess.held_pid() {
        skel.hold(pid);
    }
    bpf::put_u32_set(skel.maps().tgids, &sess.pids)?;
    bpf::put_u32_set(skel.maps().tids, &args.tids)?;
    // Before the programs: the maps of the first stacks' processes.
    // Targets named by pid: their maps only (processes met later come
    // with their fork records, or are read from /proc as before).
    let only = (!sess.system_wide() && sess.cgroup.is_none()).then(|| sess.pids.clone());
    let log = (std::env::var_os("WALLCLOCK_NO_MMAP_LOG").is_none())
        .then(|| crate::mmaplog::MmapLog::open(only.as_deref()))
        .transpose()
        .inspect_err(|e| eprintln!("{}: warning: the kernel's mmap records (perf_event_open): {e}: maps are read from /proc alone, late for short processes", T::NAME))
        .ok()
        .flatten();
    let links = tool.attach(&skel, btf)?;
    let tree_links = attach_tree(&skel, btf, sess.follow)?;
    crate::bpfsyms::at_attach();
    // Children of -p -C created while loading: the fork hook missed them.
    let late = sess.late_children();
    bpf::put_u32_set(skel.maps().tgids, &late)?;
    let mut unwind = Unwind::new();
    if let Some(mut log) = log {
        if only.is_some() {
            log.synthesize(late.iter().copied());
        }
        unwind.use_log(log);
    }
    if req.spool_maps {
        match crate::spool::Spool::new() {
            Ok(s) => unwind.spool_gone(s),
            Err(e) => eprintln!("{}: warning: {e}: exited processes' maps stay in memory until the stop", T::NAME),
        }
    }
    let drain = Drain::start(libbpf_rs::MapHandle::try_from(skel.maps().events)?, common.ringbuf_bytes)?;
    // Exec and fork markers travel in order with the stacks: the unwinder
    // follows each process's images.
    // A PHP is looked for at its exec (Runtime::at_exec), not a turn later.
    let rt_maps = (
        libbpf_rs::MapHandle::try_from(skel.maps().py_threads)?,
        libbpf_rs::MapHandle::try_from(skel.maps().py_cfg)?,
        libbpf_rs::MapHandle::try_from(skel.maps().rb_cfg)?,
        libbpf_rs::MapHandle::try_from(skel.maps().rt_gen)?,
    );
    let event = |tool: &mut T, e: &[u8], unwind: &mut Unwind| {
        if !tree::marker(e, unwind) {
            tool.event(e, unwind);
        } else if let Some(pid) = tree::exec_pid(e) {
            let maps = BpfMaps { py_threads: &rt_maps.0, py_cfg: &rt_maps.1, rb_cfg: &rt_maps.2 };
            if unwind.runtimes.at_exec(pid, &maps) {
                bpf::bump_gen(&rt_maps.3);
            }
        }
    };

    // The threads of the Python interpreters among the targets, before the
    // start and at every turn (a new thread's frames are read from then on).
    let python = |unwind: &mut Unwind, sess: &Session, skel: &T::Skel| {
        let mut pids = sess.pids.clone();
        pids.extend(bpf::u32_keys(skel.maps().tgids));
        pids.sort_unstable();
        pids.dedup();
        let m = skel.maps();
        let maps = BpfMaps { py_threads: m.py_threads, py_cfg: m.py_cfg, rb_cfg: m.rb_cfg };
        if unwind.runtimes.refresh(&pids, &maps) {
            bpf::bump_gen(skel.maps().rt_gen);
        }
    };
    python(&mut unwind, &sess, &skel);
    let goroutines = tool.goroutines().map(|(hz, out)| crate::goroutines::Sampler::start(T::NAME, hz, &out)).transpose()?;
    let tasks = tool.tasks().map(|(hz, out)| crate::asyncio::Sampler::start(hz, &out)).transpose()?;
    // The window is written into the BPF side before it opens, with its
    // end when -d gives one: the programs count exactly [start, end),
    // however late this loop wakes for either (two captures given one
    // activation instant record the same interval). A held command's
    // window opens at its exec: -d counts from there (below).
    let start = crate::wait::activation(T::NAME, &schedule, &args.when)?;
    let held = sess.held_pid().is_some();
    let mut deadline = sess.duration.filter(|_| !held).map(|d| start + secs_ns(d));
    skel.set_bss(Some(start), deadline, !late.is_empty());
    let boost = crate::wait::open(T::NAME, start, &schedule)?;
    drop(boost);
    snapshot(&skel, || {
        drain.work_for(Duration::from_micros(500), |e| event(tool, e, &mut unwind));
        unwind.trim_often();
    })?;
    drain.bounded();
    sess.begin(start, &args.tids, &mut unwind)?;
    sess.deadline = deadline;
    let mut windows = match (args.every, &args.every_follow, &args.output) {
        (Some(e), _, Some(o)) => Some(crate::window::Windows::new(e, o, start, sess.machine_steal.0)),
        (None, Some(l), Some(o)) => Some(crate::window::Windows::following(l, o, start, sess.machine_steal.0)),
        _ => None,
    };
    // A cut due within half a window of the end of -d is left to the stop,
    // which closes the last window: no sliver of a window after it.
    let began = std::time::Instant::now();
    let ends_soon = |sess: &Session| {
        let half = secs_ns(args.every.unwrap_or(0.0) / 2.0);
        sess.deadline.is_some_and(|d| monotonic_ns() + half >= d)
    };
    let mut retired = Retired::default();
    while !sess.should_stop(|| bpf::u32_keys(skel.maps().tgids)) {
        python(&mut unwind, &sess, &skel);
        if let Some(g) = &goroutines {
            g.targets(&sess.pids, &bpf::u32_keys(skel.maps().tgids));
        }
        if let Some(t) = &tasks {
            t.targets(&sess.pids, &bpf::u32_keys(skel.maps().tgids));
        }
        retired.turn(tool, &skel);
        sess.settle_if_ready();
        tool.turn(&skel, &sess, &unwind)?;
        let (sent, handled) = drain.counts();
        unwind.reap(sent, handled);
        // -d of a held command counts from its exec, which opens its window.
        if let (None, true, Some(d), e @ 1..) = (deadline, held, sess.duration, skel.exec_ns()) {
            deadline = Some(e + secs_ns(d));
            skel.set_bss(None, deadline, false);
            sess.deadline = deadline;
        }
        // Not past the end of -d: the stop comes when the window closes.
        let turn = deadline.map_or(20_000_000, |d| d.saturating_sub(monotonic_ns()).min(20_000_000));
        drain.work_for(Duration::from_nanos(turn), |e| event(tool, e, &mut unwind));
        if began.elapsed() < Duration::from_secs(3) {
            // The stacks blocked at the start are still being unwound.
            unwind.trim_often();
        }
        let due = windows.as_ref().and_then(|w| w.due(monotonic_ns()));
        if let (Some(w), Some(cut_at)) = (windows.as_mut(), due.filter(|_| args.every_follow.is_some() || !ends_soon(&sess))) {
            // The stacks sent before the cut, so that its blocks have them.
            drain.work_for(Duration::from_millis(2), |e| event(tool, e, &mut unwind));
            sess.settle();
            // The kernel's sums are read now: a block or a running slice
            // that ended since `due` saw the time up is in them whole, so
            // the window ends now (cut when due, it was counted whole in
            // the earlier window: 118% of a thread's time in one window
            // and 70% in the next on a loaded machine). A follower keeps
            // its leader's ends.
            let threads = retired.with(bpf_threads(&skel.maps()).1);
            let counts = bpf::percpu_sums(skel.maps().stats, event::STAT_NAMES.len() as u32);
            let cut_at = if args.every_follow.is_some() { cut_at } else { monotonic_ns().max(cut_at) };
            let machine = crate::steal::machine_ns();
            let fixed = args.every_follow.is_some();
            let cut = Cut { skel: &skel, sess: &sess, unwind: &unwind, start, end: cut_at, fixed, threads, counts };
            let Some((cut_at, recs)) = tool.snapshot(cut) else {
                anyhow::bail!("{}: --every is not supported", T::NAME);
            };
            w.close(cut_at, recs, false, machine)?;
        }
    }
    // The window closed at the end of -d, when that is what stopped it
    // (the BPF side stopped counting there); at once otherwise.
    let now = monotonic_ns();
    let end = deadline.filter(|&d| d <= now).unwrap_or(now);
    skel.set_bss(None, Some(end), false);
    // The side file failing loses nothing else of the capture.
    if let Err(e) = goroutines.map(|g| g.finish()).transpose() {
        eprintln!("{}: warning: goroutines: {e:#}", T::NAME);
    }
    if let Err(e) = tasks.map(|t| t.finish()).transpose() {
        eprintln!("{}: warning: tasks: {e:#}", T::NAME);
    }
    // The window opens at the held command's exec (when it came).
    let start = match skel.exec_ns() {
        0 => start,
        e => e.min(end),
    };
    sess.start_ns = start;
    sess.stopped(bpf::u32_keys(skel.maps().tgids));
    std::thread::sleep(Duration::from_millis(5));
    drain.finish(|e| event(tool, e, &mut unwind));
    unwind.trim();
    if unwind.log_lost() > 0 {
        eprintln!("{}: warning: {} of the kernel's mmap records were lost (its buffer full): some short processes' frames may stay unnamed", T::NAME, unwind.log_lost());
    }
    for w in unwind.runtimes.advice() {
        eprintln!("{}: warning: {w}", T::NAME);
    }
    crate::bpfsyms::at_stop();
    drop(links);
    drop(tree_links);

    let (raw_threads, threads) = bpf_threads(&skel.maps());
    sess.add_thread_pids(&raw_threads);
    sess.add_pids(retired.pids.iter().copied());
    let threads = retired.with(threads);
    if std::env::var_os("WALLCLOCK_STEAL_STATS").is_some() {
        crate::steal::debug_sums(T::NAME, &threads, sess.machine_steal);
    }
    sess.clocks_of_running(&threads);
    let counts = bpf::percpu_sums(skel.maps().stats, event::STAT_NAMES.len() as u32);
    Ok(Captured { tool: T::NAME, skel, sess, unwind, start, end, threads, counts, windows })
}

impl<S> Captured<S> {
    /// Write the records to `-o` or stdout, as a stream or (`-f`) as
    /// folded lines weighed by `value`; the tool's exit code (the
    /// launched command's).
    pub fn write(
        mut self,
        args: &TargetArgs,
        records: &[Record],
        value: impl Fn(&wallclock_stream::Stack) -> u64,
    ) -> Result<i32> {
        if let Some(mut w) = self.windows.take() {
            let mut summed: Vec<Record> =
                records.iter().filter(|r| !matches!(r, Record::Slice(_) | Record::SliceStack(_))).cloned().collect();
            // The whole capture's steal was capped to the machine's over
            // all of it; the last window is capped over its own span.
            for r in summed.iter_mut() {
                if let Record::Thread(t) = r {
                    if let Some(s) = self.sess.uncapped_steal.get(&(t.pid, t.tid)) {
                        t.steal_ns = Some(*s);
                    }
                }
            }
            w.close(self.end, summed, true, self.sess.machine_steal.1)?;
        }
        let mut out = wallclock_stream::cli::open_output(args.output.as_deref())?;
        crate::output::write(self.tool, &mut out, records, args.folded, value)?;
        drop(out);
        Ok(self.sess.finish())
    }

    /// As [`Captured::write`], with the records of each splice (records
    /// the capture wrote out as it went, `spool`) before `records[at]`:
    /// streamed from where they are, unless the output needs them all at
    /// once (folded lines, the windows of `--every`).
    pub fn write_spliced(
        mut self,
        args: &TargetArgs,
        records: &[Record],
        splices: Vec<(usize, crate::spool::Spooled)>,
        value: impl Fn(&wallclock_stream::Stack) -> u64,
    ) -> Result<i32> {
        let mut parts: Vec<Box<dyn Iterator<Item = std::io::Result<std::borrow::Cow<'_, Record>>>>> = Vec::new();
        let mut from = 0;
        for (at, spooled) in splices {
            let at = at.clamp(from, records.len());
            parts.push(Box::new(records[from..at].iter().map(|r| Ok(std::borrow::Cow::Borrowed(r)))));
            parts.push(Box::new(spooled.map(|r| r.map(std::borrow::Cow::Owned))));
            from = at;
        }
        parts.push(Box::new(records[from..].iter().map(|r| Ok(std::borrow::Cow::Borrowed(r)))));
        let all = parts.into_iter().flatten();
        if args.folded || self.windows.is_some() {
            let all: Vec<Record> = all.map(|r| r.map(std::borrow::Cow::into_owned)).collect::<std::io::Result<_>>()?;
            return self.write(args, &all, value);
        }
        let mut out = wallclock_stream::cli::open_output(args.output.as_deref())?;
        crate::output::write_stream(&mut out, all)?;
        drop(out);
        Ok(self.sess.finish())
    }
}
