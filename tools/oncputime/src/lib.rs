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

mod skel {
    #![allow(clippy::all, unused, non_snake_case, non_camel_case_types)]
    include!(concat!(env!("OUT_DIR"), "/oncputime.skel.rs"));
}

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::mem::MaybeUninit;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::RingBufferBuilder;
use wallclock_capture::event::{self, WcEvent, WcThread};
use wallclock_capture::target::{monotonic_ns, TargetArgs};
use wallclock_capture::{bpf, privs, tree, procfs, session::Session, signal, unwind::Unwind};
use wallclock_stream::{accounting, Kind, Record, Stack, Stats, Thread};

const EXAMPLES: &str = "EXAMPLES:
    oncputime -p 1234 10 > on.jsonl          # 10 s of process 1234 at 49 Hz
    oncputime -F 999 -- ./build.sh           # launch, 999 Hz, with every child it runs
    oncputime -p 1234 -C 10                  # 1234 and every process it forks
    oncputime --cgroup /sys/fs/cgroup/system.slice/nginx.service 10
    oncputime --exact -p 1234 10             # samples scaled to exact on-CPU time
    oncputime -p 1234 -f 5 > on.folded       # folded sample counts (hex addresses)
    oncputime -p 1234 | stacksym | flame > on.svg";

/// On-CPU stacks per thread, sampled on every CPU (with --exact, scaled to exact on-CPU time).
#[derive(Parser, Debug)]
#[command(name = "oncputime", version, after_help = EXAMPLES)]
pub struct Cli {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Sampling frequency per CPU, Hz.
    #[arg(short = 'F', long = "frequency", default_value_t = 49, value_name = "HZ")]
    pub freq: u64,
    /// Also measure each thread's exact on-CPU time (a sched_switch hook,
    /// about 120 ns per context switch of the target) and scale the samples
    /// to it. Off by default: offcputime measures the same time at its own
    /// switch hook, and `stackmerge` takes it from there (as scripts/wallclock
    /// does); without it, each sample stands for 1/HZ seconds.
    #[arg(long = "exact")]
    pub exact: bool,
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

fn load(cli: &Cli, sess: &Session, btf: bool) -> Result<skel::OncputimeSkel<'static>, libbpf_rs::Error> {
    let open_object = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = skel::OncputimeSkelBuilder::default().open(open_object)?;
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
    open.maps.threads.set_max_entries(cli.max_threads.max(64))?;
    // Processes of a tree, at most as many as threads.
    open.maps.tgids.set_max_entries(cli.max_threads.max(1024))?;
    open.progs.fork_btf.set_autoload(f.follow && btf);
    open.progs.fork_raw.set_autoload(f.follow && !btf);
    open.progs.exec_btf.set_autoload(btf);
    open.progs.exec_raw.set_autoload(!btf);
    open.maps.events.set_max_entries(cli.target.ringbuf_mb << 20)?;
    open.progs.switch_btf.set_autoload(cli.exact && btf);
    open.progs.switch_raw.set_autoload(cli.exact && !btf);
    open.load()
}

#[derive(Default)]
struct Samples {
    /// (tid, ustack, kstack) -> samples
    stacks: BTreeMap<(u32, Vec<u64>, Vec<u64>), u64>,
    per_thread: HashMap<u32, (u32, u64, String)>,
}

impl Samples {
    fn event(&mut self, data: &[u8], unwind: &mut Unwind) {
        let Some(e) = event::from_bytes::<WcEvent>(data) else { return };
        let ustack = unwind.unwind(e.pid, e.ip, e.sp, e.bp, e.ustack_bytes());
        *self.stacks.entry((e.tid, ustack, e.kstack_root_first())).or_default() += 1;
        let t = self.per_thread.entry(e.tid).or_insert((e.pid, 0, String::new()));
        t.1 += 1;
        t.2 = event::comm_str(&e.comm);
    }
}

pub fn run(cli: Cli) -> Result<i32> {
    privs::check("oncputime")?;
    if cli.freq == 0 {
        anyhow::bail!("-F must be at least 1 Hz");
    }
    let mut sess = Session::prepare(&cli.target, cli.duration, &cli.command)?;
    signal::install();
    bpf::capture_log();
    let want_btf = std::env::var_os("WALLCLOCK_FORCE_RAW_TP").is_none();
    let (mut skel, btf) = match load(&cli, &sess, want_btf) {
        Ok(s) => (s, want_btf),
        Err(e) if want_btf => (load(&cli, &sess, false).map_err(|_| bpf::load_error("oncputime", e))?, false),
        Err(e) => return Err(bpf::load_error("oncputime", e)),
    };
    bpf::put_u32_set(&skel.maps.tgids, &sess.pids)?;
    bpf::put_u32_set(&skel.maps.tids, &cli.target.tids)?;
    let _switch = if !cli.exact {
        None
    } else if btf {
        Some(skel.progs.switch_btf.attach().context("attaching to sched_switch")?)
    } else {
        Some(skel.progs.switch_raw.attach().context("attaching to sched_switch")?)
    };
    let mut links = Vec::new();
    for cpu in bpf::online_cpus() {
        let fd = bpf::open_cpu_clock(cpu, cli.freq)?;
        links.push(skel.progs.on_sample.attach_perf_event(fd).context("attaching the perf event program")?);
    }

    let _tree = attach_tree(&skel, btf, sess.follow)?;
    // Children of -p -C created while loading: the fork hook missed them.
    let late = sess.late_children();
    bpf::put_u32_set(&skel.maps.tgids, &late)?;
    let unwind = RefCell::new(Unwind::new());
    let samples = RefCell::new(Samples::default());
    let mut rbb = RingBufferBuilder::new();
    rbb.add(&skel.maps.events, |data: &[u8]| {
        if !tree::marker(data, &mut unwind.borrow_mut()) {
            samples.borrow_mut().event(data, &mut unwind.borrow_mut());
        }
        0
    })?;
    let rb = rbb.build()?;

    let start = monotonic_ns();
    let bss = skel.maps.bss_data.as_deref_mut().expect("bss");
    // SAFETY: bss is the program's mmapped .bss; the BPF side reads it.
    unsafe { std::ptr::write_volatile(&mut bss.start_ns, start) };
    if !late.is_empty() {
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(&mut bss.tree_grown, 1) };
    }
    sess.begin(start, &cli.target.tids, &mut unwind.borrow_mut())?;
    while !sess.should_stop(|| bpf::u32_keys(&skel.maps.tgids)) {
        let _ = rb.poll(Duration::from_millis(20));
    }
    let end = monotonic_ns();
    // SAFETY: as above.
    unsafe { std::ptr::write_volatile(&mut bss.end_ns, end) };
    sess.stopped(bpf::u32_keys(&skel.maps.tgids));
    std::thread::sleep(Duration::from_millis(5));
    let _ = rb.consume();
    drop(rb);
    drop(links);

    let threads = bpf::dump(&skel.maps.threads);
    sess.add_thread_pids(&threads);
    let counts = bpf::percpu_sums(&skel.maps.stats, event::STAT_NAMES.len() as u32);
    let records = records(&cli, &sess, start, end, &unwind.borrow(), &samples.borrow(), &threads, &counts);
    let mut out = wallclock_stream::cli::open_output(cli.target.output.as_deref())?;
    wallclock_capture::output::write(&mut out, &records, cli.target.folded, |s| s.count)?;
    drop(out);
    Ok(sess.finish())
}

#[allow(clippy::too_many_arguments)]
fn records(
    cli: &Cli,
    sess: &Session,
    start: u64,
    end: u64,
    unwind: &Unwind,
    samples: &Samples,
    threads: &[(Vec<u8>, Vec<u8>)],
    counts: &[u64],
) -> Vec<Record> {
    let mut out: BTreeMap<u32, Thread> = BTreeMap::new();
    for (k, v) in threads {
        let (Some(tid), Some(th)) =
            (k.get(..4).map(|b| u32::from_ne_bytes(b.try_into().unwrap())), event::from_bytes::<WcThread>(v))
        else {
            continue;
        };
        let mut on = th.on_ns;
        if th.exit_ns == 0 && th.running != 0 && th.last_ts < end {
            on += end - th.last_ts;
        }
        let comm = (th.exit_ns > 0)
            .then(|| event::comm_str(&th.comm))
            .or_else(|| procfs::comm(th.pid, tid))
            .or_else(|| samples.per_thread.get(&tid).map(|t| t.2.clone()))
            .unwrap_or_else(|| event::comm_str(&th.comm));
        let mut t = Thread::new(th.pid, tid, &comm);
        // Without the switch hook the thread's life and on-CPU time are
        // unknown here (its first sample is not its start): say nothing.
        if cli.exact {
            t.start_ns = Some(th.begin_ns);
            t.end_ns = Some(if th.exit_ns > 0 { th.exit_ns.min(end) } else { end });
            t.on_ns = Some(on);
            t.steal_ns = Some(sess.steal_of(tid, &th, end, on));
        }
        t.samples = Some(samples.per_thread.get(&tid).map_or(0, |t| t.1));
        out.insert(tid, t);
    }
    for (&tid, i) in &sess.initial {
        if !out.contains_key(&tid) && procfs::exists(i.pid) {
            let mut t = Thread::new(i.pid, tid, &procfs::comm(i.pid, tid).unwrap_or_else(|| i.comm.clone()));
            if cli.exact {
                t.start_ns = Some(start);
                t.end_ns = Some(end);
                t.on_ns = Some(0);
                t.steal_ns = Some(0);
            }
            t.samples = Some(0);
            out.insert(tid, t);
        }
    }
    let mut header = sess.header("oncputime", env!("CARGO_PKG_VERSION"), end);
    header.freq_hz = Some(cli.freq);
    let mut stats = Stats { end_ns: Some(end), counts: BTreeMap::new() };
    for (name, v) in event::STAT_NAMES.iter().zip(counts) {
        if !matches!(*name, "new_stacks" | "over_max_blocks" | "switches") {
            stats.counts.insert(name.to_string(), *v);
        }
    }
    stats.counts.insert("threads".into(), out.len() as u64);
    for k in ["ringbuf_drops", "map_full"] {
        if stats.counts[k] > 0 {
            header.lost.insert(k.into(), stats.counts[k]);
        }
    }
    let mut recs = vec![Record::Header(header)];
    recs.extend(unwind.maps_records().into_iter().map(Record::Maps));
    recs.extend(out.values().cloned().map(Record::Thread));
    recs.extend(out.values().filter_map(accounting::steal_stack).map(Record::Stack));
    for ((tid, u, k), n) in &samples.stacks {
        let (pid, comm, on, tot) = match out.get(tid) {
            Some(t) => (t.pid, t.comm.clone(), accounting::sampled_on_ns(t), t.samples.unwrap_or(0)),
            None => (samples.per_thread.get(tid).map_or(0, |t| t.0), String::new(), None, 0),
        };
        let mut s = Stack::new(Kind::On, pid, *tid, &comm);
        s.ustack = u.clone();
        s.kstack = k.clone();
        s.count = *n;
        s.ns = match on {
            Some(on) if tot > 0 => accounting::scale_samples(on, *n, tot),
            _ => accounting::samples_to_ns(*n, cli.freq),
        };
        recs.push(Record::Stack(s));
    }
    recs.push(Record::Stats(stats));
    recs
}

/// The exec program of bpf/tree.bpf.h (the unwinder follows images), and
/// with a tree the fork program (new processes join the target).
fn attach_tree(skel: &skel::OncputimeSkel<'static>, btf: bool, follow: bool) -> Result<Vec<libbpf_rs::Link>> {
    let exec = if btf { &skel.progs.exec_btf } else { &skel.progs.exec_raw };
    let mut links = vec![exec.attach().context("attaching to sched_process_exec")?];
    if follow {
        let fork = if btf { &skel.progs.fork_btf } else { &skel.progs.fork_raw };
        links.push(fork.attach().context("attaching to sched_process_fork")?);
    }
    Ok(links)
}
