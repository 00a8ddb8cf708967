//! oncputime: on-CPU stacks per thread, sampled by a software cpu-clock
//! perf event at `-F` Hz on every CPU and filtered to the target in BPF;
//! with `--exact`, also each thread's exact on-CPU time (sched_switch) so
//! that samples can be scaled to time.
//!
//! Usage: `oncputime [-p PID] [-F HZ] [-d SECONDS] [-o FILE] [-- COMMAND ARGS]`
//!
//! Writes the wallclock stream (`Header`, `Maps`, `Thread` with `samples`
//! (and `on_ns` with `--exact`), `Stack` kind `on`, `Stats`); `-f` writes
//! folded sample counts.
//!
//! The capture (load, attach, the ring buffer drained by a thread of its
//! own so that unwinding never stalls it, window, stop) is the capture
//! crate's `driver`; this crate holds the BPF configuration and records.

mod skel {
    #![allow(clippy::all, clippy::undocumented_unsafe_blocks, unused, non_snake_case, non_camel_case_types)]
    include!(concat!(env!("OUT_DIR"), "/oncputime.skel.rs"));
}

use std::collections::{BTreeMap, HashMap};

use anyhow::{Context, Result};
use clap::Parser;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use wallclock_capture::driver::{self, Common, OpenCapture, Request};
use wallclock_capture::event::{self, WcEvent, WcThread};
use wallclock_capture::target::TargetArgs;
use wallclock_capture::{bpf, procfs, session::Session, unwind::Unwind};
use wallclock_stream::{accounting, Kind, ProbeEvent, Record, SliceStack, Stack, Stats, Thread};

wallclock_capture::capture_skel!(
    skel::OpenOncputimeSkel<'static>,
    skel::OncputimeSkel<'static>,
    skel::types::wc_thread
);

const EXAMPLES: &str = concat!(
    "EXAMPLES:
    oncputime -p 1234 10 > on.jsonl          # 10 s of process 1234 at 49 Hz
    oncputime -F 999 -- ./build.sh           # launch, 999 Hz, with every child it runs
    oncputime -p 1234 -C 10                  # 1234 and every process it forks
    oncputime --cgroup /sys/fs/cgroup/system.slice/nginx.service 10
    oncputime --exact -p 1234 10             # samples scaled to exact on-CPU time
    oncputime -p 1234 -f 5 > on.folded       # folded sample counts (named)
    oncputime -p 1234 | stacksym | flame > on.svg
    oncputime -e page-faults -- ./app        # where it faults (a sample every 100 faults)
    oncputime -e context-switches@1 -p 1234  # every context switch, with its stack

MEMORY:
    The Maps record of a process that exits is kept in an unlinked file
    in $TMPDIR (default /tmp) until the stop writes it to the output (not
    with -f or --every): what the capture holds is bounded by the
    processes alive, not by how long it runs.

",
    wallclock_capture::files_of_the_target_help!()
);

/// On-CPU stacks per thread, sampled on every CPU (with --exact, scaled to exact on-CPU time).
#[derive(Parser, Debug)]
#[command(name = "oncputime", version, after_help = EXAMPLES)]
pub struct Cli {
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub probe: wallclock_capture::probe::ProbeArgs,
    /// Sampling frequency per CPU, Hz.
    #[arg(short = 'F', long = "frequency", alias = "freq", default_value_t = 49, value_name = "HZ")]
    pub freq: u64,
    /// Sample on this perf event instead of the cpu clock, one sample every
    /// PERIOD events: page-faults (@100 by default), minor-faults (@100),
    /// major-faults (@1), context-switches (@10), cpu-migrations (@1),
    /// and where the CPU has a PMU cycles, instructions (@1000003),
    /// cache-misses (@10007), rNNNN (a raw event, hex). The profile then
    /// counts events, not time: each stack weighs its samples times
    /// PERIOD, and the header, wcreport and flame say the event.
    #[arg(short = 'e', long = "event", value_name = "EVENT[@PERIOD]", default_value = "cpu-clock")]
    pub event: wallclock_capture::events::Event,
    /// Also measure each thread's exact on-CPU time (a sched_switch hook,
    /// about 120 ns per context switch of the target) and scale the samples
    /// to it. Off by default: offcputime measures the same time at its own
    /// switch hook, and `stackmerge` takes it from there (as scripts/wallclock
    /// does); without it, each sample stands for 1/HZ seconds.
    #[arg(long = "exact")]
    pub exact: bool,
    /// Also write every sample with its time, as a `probe` record named
    /// `[on-CPU sample]` whose stack is a `slice_stack` record: what
    /// `wcreport --spans` divides a span's on-CPU time by (wallclock --span).
    #[arg(long = "sample-events")]
    pub sample_events: bool,
    /// Also sample the goroutines of the Go processes among the targets at
    /// the sampling frequency (at most 100 Hz), from the runtime's own state:
    /// each goroutine's state or wait reason and the stack it parked with,
    /// into FILE as folded lines of goroutine-microseconds
    /// (`runtime.goexit;...;runtime.gopark;[chan receive] 5000000`), and the
    /// GOROUTINES section of the report into FILE.report. A sampled view,
    /// apart from the stream's per-thread time.
    #[arg(long = "goroutines", value_name = "FILE")]
    pub goroutines: Option<std::path::PathBuf>,
    /// Also sample the asyncio tasks of the CPython 3.11-3.15 processes
    /// among the targets at the sampling frequency (at most 100 Hz), from the
    /// interpreter's own objects: each pending task's await chain and state,
    /// into FILE as folded lines of task-microseconds
    /// (`py::worker:app.py;py::fetch:app.py;...;[sleep] 5000000`), and the
    /// TASKS section of the report into FILE.report. A sampled view, apart
    /// from the stream's per-thread time.
    #[arg(long = "tasks", value_name = "FILE")]
    pub tasks: Option<std::path::PathBuf>,
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

#[derive(Default)]
struct Samples {
    /// (tid, pgen, ustack, kstack) -> samples; pgen: the process's
    /// generation under its pid (a pid used again in the capture).
    stacks: BTreeMap<(u32, u32, Vec<u64>, Vec<u64>), u64>,
    per_thread: HashMap<(u32, u32), (u32, u64, String)>,
    /// --sample-events: (pid, tid, time, stack id) per sample, and the ids.
    timed: Option<Vec<(u32, u32, u64, u64)>>,
    ids: HashMap<(u32, Vec<u64>, Vec<u64>), u64>,
}

impl Samples {
    fn event(&mut self, data: &[u8], unwind: &mut Unwind) {
        let Some(e) = WcEvent::parse(data) else { return };
        let ustack = unwind.event_stack(&e);
        if let Some(timed) = self.timed.as_mut() {
            let n = self.ids.len() as u64;
            let id = *self.ids.entry((e.pid, ustack.clone(), e.kstack_root_first())).or_insert(n);
            timed.push((e.pid, e.tid, e.ts, id));
        }
        let pgen = unwind.pgen_at(e.pid, e.ts).unwrap_or(0);
        *self.stacks.entry((e.tid, pgen, ustack, e.kstack_root_first())).or_default() += 1;
        let t = self.per_thread.entry((e.tid, pgen)).or_insert((e.pid, 0, String::new()));
        t.1 += 1;
        t.2 = event::comm_str(&e.comm);
    }
}

/// oncputime's part of the capture: its perf events (and with --exact
/// sched_switch), the samples.
struct On<'a> {
    cli: &'a Cli,
    samples: Samples,
    /// --probe: the specs (events only), and their ring buffer's consumer.
    probes: wallclock_capture::probe::Probes,
    probe_drain: std::cell::RefCell<Option<wallclock_capture::probe::Drain>>,
    probe_stacks: wallclock_capture::probe::Stacks,
}

impl driver::Tool for On<'_> {
    type Skel = skel::OncputimeSkel<'static>;
    const NAME: &'static str = "oncputime";

    fn load(&self, common: &Common, btf: bool) -> Result<Self::Skel, libbpf_rs::Error> {
        let mut open = skel::OncputimeSkelBuilder::default().open(driver::object())?;
        open.common(common, btf)?;
        open.progs.switch_btf.set_autoload(self.cli.exact && btf);
        open.progs.switch_raw.set_autoload(self.cli.exact && !btf);
        // Timed samples: the one due while a task switches is the task's
        // leaving (bpf/oncputime.bpf.c, struct wc_cpu_tick).
        let timed = self.cli.event.is_clock() && self.cli.freq > 0;
        open.progs.tick_btf.set_autoload(timed && btf);
        open.progs.tick_raw.set_autoload(timed && !btf);
        let probes = self.probes.any();
        let ro = open.maps.rodata_data.as_deref_mut().expect("rodata");
        ro.probes_on = probes;
        ro.period_ns = if timed { 1_000_000_000 / self.cli.freq } else { 0 };
        open.progs.wc_uprobe.set_autoload(probes);
        open.progs.wc_uretprobe.set_autoload(probes);
        open.progs.wc_usdt.set_autoload(probes);
        open.progs.wc_raw_tp.set_autoload(probes);
        open.progs.wc_tp.set_autoload(probes);
        if probes {
            open.maps.probe_events.set_max_entries(4 << 20)?;
        }
        open.load()
    }

    fn attach(&self, skel: &Self::Skel, btf: bool) -> Result<Vec<libbpf_rs::Link>> {
        let mut links = Vec::new();
        if self.probes.any() {
            let map = libbpf_rs::MapHandle::try_from(&skel.maps.probe_events)?;
            *self.probe_drain.borrow_mut() = Some(wallclock_capture::probe::Drain::start(map, "oncputime", &self.probes.specs)?);
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
        if self.cli.exact {
            let switch = if btf { &skel.progs.switch_btf } else { &skel.progs.switch_raw };
            links.push(switch.attach().context("attaching to sched_switch")?);
        }
        if self.cli.event.is_clock() && self.cli.freq > 0 {
            let tick = if btf { &skel.progs.tick_btf } else { &skel.progs.tick_raw };
            links.push(tick.attach().context("attaching to sched_switch")?);
        }
        for cpu in bpf::online_cpus() {
            let fd = self.cli.event.open(cpu, self.cli.freq)?;
            links.push(skel.progs.on_sample.attach_perf_event(fd).context("attaching the perf event program")?);
        }
        Ok(links)
    }

    fn event(&mut self, data: &[u8], unwind: &mut Unwind) {
        if self.probe_stacks.event(data, unwind) {
            return;
        }
        self.samples.event(data, unwind);
    }

    fn goroutines(&self) -> Option<(u64, std::path::PathBuf)> {
        self.cli.goroutines.clone().map(|f| (self.cli.freq.min(100), f))
    }

    fn tasks(&self) -> Option<(u64, std::path::PathBuf)> {
        self.cli.tasks.clone().map(|f| (self.cli.freq.min(100), f))
    }

    fn snapshot(&mut self, cut: driver::Cut<'_, Self::Skel>) -> Option<(u64, Vec<Record>)> {
        Some((cut.end, records(self.cli, cut.sess, cut.start, cut.end, cut.unwind, &self.samples, &cut.threads, &cut.counts)))
    }
}

pub fn run(cli: Cli) -> Result<i32> {
    if cli.freq == 0 {
        anyhow::bail!("-F must be at least 1 Hz");
    }
    if let Some(e) = cli.event.counted() {
        if cli.exact {
            anyhow::bail!("--exact scales samples to on-CPU time: -e {e} counts events, not time");
        }
        cli.event.check()?;
    }
    let mut samples = Samples::default();
    if cli.sample_events {
        samples.timed = Some(Vec::new());
    }
    let probes = wallclock_capture::probe::Probes::new(&cli.probe, &cli.command, &cli.target.pids)?;
    if let Some(s) = probes.specs.iter().find(|s| s.is_span()) {
        anyhow::bail!("--probe '{}': spans are offcputime's (their off-CPU time is measured at its switch hook); oncputime records events", s.text);
    }
    let mut on = On { cli: &cli, samples, probes, probe_drain: Default::default(), probe_stacks: Default::default() };
    // Exited processes' Maps records wait in a file until the stop, which
    // streams them (not for outputs that need all records at once).
    let t = &cli.target;
    let spool_maps = !t.folded && t.every.is_none() && t.every_follow.is_none();
    let req = Request { target: &cli.target, duration: cli.duration, command: &cli.command, max_threads: cli.max_threads, blocked_stacks: false, spool_maps };
    let mut cap = driver::capture(&mut on, req)?;
    // Every process exit so far, for the generations of reused pids.
    cap.unwind.sync_log();
    let mut records = records(&cli, &cap.sess, cap.start, cap.end, &cap.unwind, &on.samples, &cap.threads, &cap.counts);
    cap.sess.cap_steal(&mut records);
    if let Some(events) = on.probe_drain.take().map(wallclock_capture::probe::Drain::finish) {
        let counts = bpf::percpu_sums(&cap.skel.maps.probe_stats, event::PROBE_STAT_NAMES.len() as u32);
        let (recs, pcounts) = wallclock_capture::probe::records(&on.probes, events, &on.probe_stacks, &counts);
        let trailer = records.pop();
        records.extend(recs);
        if let Some(Record::Stats(mut s)) = trailer {
            s.counts.extend(pcounts);
            records.push(Record::Stats(s));
        }
    }
    // Folded values: samples of the clock, events of another event.
    let counted = cli.event.counted().is_some();
    let value = |s: &wallclock_stream::Stack| if counted { s.ns } else { s.count };
    match cap.unwind.take_gone_spool() {
        Some(maps) => cap.write_spliced(&cli.target, &records, vec![(1, maps.read()?)], value),
        None => cap.write(&cli.target, &records, value),
    }
}

#[allow(clippy::too_many_arguments)]
fn records(
    cli: &Cli,
    sess: &Session,
    start: u64,
    end: u64,
    unwind: &Unwind,
    samples: &Samples,
    threads: &[(u32, WcThread)],
    counts: &[u64],
) -> Vec<Record> {
    let (out, hidden) = thread_records(cli, sess, (start, end), unwind, samples, threads);
    let mut header = sess.header("oncputime", env!("CARGO_PKG_VERSION"), end);
    match cli.event.counted() {
        Some(e) => (header.event, header.event_period) = (Some(e.to_string()), Some(cli.event.period)),
        None => header.freq_hz = Some(cli.freq),
    }
    let mut stats = Stats { end_ns: Some(end), counts: BTreeMap::new() };
    for (name, v) in event::STAT_NAMES.iter().zip(counts) {
        if !matches!(*name, "new_stacks" | "over_max_blocks" | "switches") {
            stats.counts.insert(name.to_string(), *v);
        }
    }
    stats.counts.insert("threads".into(), out.len() as u64);
    stats.counts.insert("hidden_threads".into(), hidden as u64);
    stats.counts.extend(unwind.reader_stats());
    for k in ["ringbuf_drops", "map_full"] {
        if stats.counts[k] > 0 {
            header.lost.insert(k.into(), stats.counts[k]);
        }
    }
    let mut recs = vec![Record::Header(header)];
    recs.extend(unwind.maps_records().into_iter().map(Record::Maps));
    recs.extend(out.values().cloned().map(Record::Thread));
    recs.extend(out.values().filter_map(accounting::steal_stack).map(Record::Stack));
    recs.extend(stack_records(cli, samples, &out));
    if let Some(timed) = &samples.timed {
        recs.extend(sample_events(timed, &samples.ids));
    }
    recs.push(Record::Stats(stats));
    recs
}

/// The Thread records, by (tid, pgen) (a thread of a pid used again is
/// another thread), named as their runtime names them; and how many of
/// them the kernel keeps from BPF.
fn thread_records(cli: &Cli, sess: &Session, (start, end): (u64, u64), unwind: &Unwind, samples: &Samples, threads: &[(u32, WcThread)]) -> (BTreeMap<(u32, u32), Thread>, usize) {
    let mut out: BTreeMap<(u32, u32), Thread> = BTreeMap::new();
    // Threads the kernel keeps from BPF (wallclock_capture::hidden): no
    // samples, their on-CPU time from their own clock.
    let hidden = sess.hidden(threads, end);
    for h in &hidden {
        let mut t = Thread::new(h.pid, h.tid, &h.comm);
        if cli.exact {
            t.start_ns = Some(start);
            t.end_ns = Some(end);
            t.on_ns = Some(h.on_ns);
            t.steal_ns = Some(0);
        }
        t.samples = Some(0);
        out.insert((h.tid, 0), t);
    }
    let hid: std::collections::HashSet<u32> = hidden.iter().map(|h| h.tid).collect();
    for &(key, th) in threads.iter().filter(|(tid, _)| !hid.contains(tid)) {
        let mut on = th.on_ns;
        let pgen = unwind.pgen(th.pid, th.begin_ns).unwrap_or(0);
        if th.exit_ns == 0 && th.running != 0 && th.last_ts < end {
            on += sess.open_slice(key, &th, end).0;
        }
        // The samples know a thread by tid and pgen: a tid used again
        // within one process is one thread here.
        let tid = event::real_tid(key);
        let comm = (th.exit_ns > 0)
            .then(|| event::comm_str(&th.comm))
            .or_else(|| procfs::comm(th.pid, tid))
            .or_else(|| samples.per_thread.get(&(tid, pgen)).map(|t| t.2.clone()))
            .unwrap_or_else(|| event::comm_str(&th.comm));
        let mut t = Thread::new(th.pid, tid, &comm);
        // Without the switch hook the thread's life and on-CPU time are
        // unknown here (its first sample is not its start): say nothing.
        if cli.exact {
            t.start_ns = Some(th.begin_ns);
            t.end_ns = Some(if th.exit_ns > 0 { th.exit_ns.min(end) } else { end });
            t.on_ns = Some(on);
            t.steal_ns = Some(sess.steal_of(key, &th, end, on));
        }
        t.samples = Some(samples.per_thread.get(&(tid, pgen)).map_or(0, |t| t.1));
        t.pgen = (pgen > 0).then_some(pgen);
        out.insert((tid, pgen), t);
    }
    for (&tid, i) in &sess.initial {
        if !out.contains_key(&(tid, 0)) && procfs::exists(i.pid) {
            let mut t = Thread::new(i.pid, tid, &procfs::comm(i.pid, tid).unwrap_or_else(|| i.comm.clone()));
            if cli.exact {
                t.start_ns = Some(start);
                t.end_ns = Some(end);
                t.on_ns = Some(0);
                t.steal_ns = Some(0);
            }
            t.samples = Some(0);
            out.insert((tid, 0), t);
        }
    }
    unwind.runtimes.name_threads(out.values_mut());
    (out, hidden.len())
}

/// The Stack records of the samples, each weighed as the thread's on-CPU
/// time shares out (or the event's period, or the sampling frequency).
fn stack_records(cli: &Cli, samples: &Samples, out: &BTreeMap<(u32, u32), Thread>) -> Vec<Record> {
    let mut recs = Vec::new();
    for ((tid, pgen, u, k), n) in &samples.stacks {
        let (pid, comm, on, tot) = match out.get(&(*tid, *pgen)) {
            Some(t) => (t.pid, t.comm.clone(), accounting::sampled_on_ns(t), t.samples.unwrap_or(0)),
            None => (samples.per_thread.get(&(*tid, *pgen)).map_or(0, |t| t.0), String::new(), None, 0),
        };
        let mut s = Stack::new(Kind::On, pid, *tid, &comm);
        s.pgen = (*pgen > 0).then_some(*pgen);
        s.ustack = u.clone();
        s.kstack = k.clone();
        s.count = *n;
        s.ns = match on {
            _ if !cli.event.is_clock() => n * cli.event.period,
            Some(on) if tot > 0 => accounting::scale_samples(on, *n, tot),
            _ => accounting::samples_to_ns(*n, cli.freq),
        };
        recs.push(Record::Stack(s));
    }
    recs
}

/// `--sample-events`: the stacks, then each sample in time order.
fn sample_events(timed: &[(u32, u32, u64, u64)], ids: &HashMap<(u32, Vec<u64>, Vec<u64>), u64>) -> Vec<Record> {
    let mut stacks: Vec<_> = ids.iter().collect();
    stacks.sort_by_key(|(_, id)| **id);
    let mut out: Vec<Record> = stacks
        .into_iter()
        .map(|((pid, u, k), id)| {
            Record::SliceStack(SliceStack { id: *id, pid: *pid, ustack: u.clone(), kstack: k.clone(), frames: Vec::new(), object: None })
        })
        .collect();
    let mut timed = timed.to_vec();
    timed.sort_by_key(|t| (t.2, t.1));
    out.extend(timed.into_iter().map(|(pid, tid, ts_ns, id)| {
        Record::Probe(ProbeEvent { probe: SAMPLE_EVENT.into(), pid, tid, ts_ns, args: Default::default(), stack: Some(id) })
    }));
    out
}

/// The name of `--sample-events`' records.
pub const SAMPLE_EVENT: &str = "[on-CPU sample]";
