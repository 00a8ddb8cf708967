//! `--probe`: the program's own events and spans (bpf/probe.bpf.h). The
//! specs ([`spec`]) are attached before the window opens, one link per
//! point, each with a cookie naming its probe and role; a probe that
//! cannot attach is an error then, naming it. USDT probes guarded by a
//! semaphore (PostgreSQL's) get it raised by the kernel's uprobe reference
//! counter for as long as the link lives, and lowered after: libbpf passes
//! the semaphore's offset with the attach. The probe ring buffer is
//! drained by a thread of its own; at the stop its records become
//! `probe` and `span` records (wallclock-stream(5), 1.4).

pub mod spec;
pub mod tracefs;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use libbpf_rs::{Link, MapHandle, ProgramMut, RingBufferBuilder, UprobeOpts, UsdtOpts};
use wallclock_stream::{ProbeEvent, Record, Span, StateNs};

use crate::event::{self, WcProbeEvent};
pub use spec::{Arg, Point, Site, Spec};

/// The probe flags every capture tool takes.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ProbeArgs {
    /// A probe of the program's own (repeatable; @FILE: one per line, #
    /// comments): u:FUNC[+OFF], uret:FUNC, usdt:PROVIDER:NAME,
    /// raw_tp:NAME (a kernel tracepoint on a target thread),
    /// tp:CATEGORY:NAME (FIELD, ...) (its record's integer fields by
    /// name), uspan:FUNC (a span from entry to return), or `A ~~ B` (a span
    /// from A to the next B on the same thread); parameters in parentheses
    /// (arg:N, arg:ret, stack, path:FILE, pid:PID) and settings between bars
    /// (| name:"req {arg0}" |: each event named by its arguments).
    /// See wallclock-stream(5) for the records.
    #[arg(long = "probe", value_name = "SPEC")]
    pub probes: Vec<String>,
    /// The file of probes without path: (default: the launched command's
    /// executable, else the first target process's).
    #[arg(long = "probe-binary", value_name = "FILE")]
    pub binary: Option<PathBuf>,
}

/// The parsed probes and where they attach by default.
pub struct Probes {
    pub specs: Vec<Spec>,
    pub binary: Option<PathBuf>,
}

impl Probes {
    /// Parse the flags; `command` and `pids` give the default file.
    pub fn new(args: &ProbeArgs, command: &[String], pids: &[u32]) -> Result<Probes> {
        let specs = spec::expand(&args.probes).map_err(anyhow::Error::msg)?;
        if let Some(s) = specs.iter().find(|s| s.is_span() && s.begin.stack) {
            anyhow::bail!("--probe '{}': `stack` is for events (a span's stacks are the capture's own, inside it)", s.text);
        }
        let binary = args.binary.clone().or_else(|| default_binary(command, pids));
        Ok(Probes { specs, binary })
    }
    pub fn any(&self) -> bool {
        !self.specs.is_empty()
    }
    pub fn spans(&self) -> bool {
        self.specs.iter().any(Spec::is_span)
    }
}

/// The launched command's file (looked up in PATH as exec does), else
/// the first target's executable.
fn default_binary(command: &[String], pids: &[u32]) -> Option<PathBuf> {
    if let Some(c) = command.first() {
        if c.contains('/') {
            return Some(PathBuf::from(c));
        }
        let path = std::env::var_os("PATH")?;
        return std::env::split_paths(&path).map(|d| d.join(c)).find(|p| p.is_file());
    }
    let pid = pids.first()?;
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// The programs of probe.bpf.h.
pub struct Progs<'a> {
    pub uprobe: &'a ProgramMut<'static>,
    pub uretprobe: &'a ProgramMut<'static>,
    pub usdt: &'a ProgramMut<'static>,
    pub raw_tp: &'a ProgramMut<'static>,
    pub tp: &'a ProgramMut<'static>,
    /// tp:'s fields by probe index (struct wc_tp_fields).
    pub tp_fields: &'a libbpf_rs::MapMut<'static>,
}

/// The most `tp:` probes (tp_fields' size in probe.bpf.h).
const MAX_TP: usize = 64;

const ROLE_BEGIN: u64 = 1;
const ROLE_END: u64 = 2;

/// Attach every probe; the first that fails is the error.
pub fn attach(probes: &Probes, progs: &Progs<'_>) -> Result<Vec<Link>> {
    let mut links = Vec::new();
    let tps = probes.specs.iter().filter(|s| std::iter::once(&s.begin).chain(&s.end).any(|p| matches!(p.site, Site::Tp { .. }))).count();
    if tps > MAX_TP {
        anyhow::bail!("--probe: more than {MAX_TP} tp: probes");
    }
    // Held while attaching: libbpf reads each event's id there.
    let _tracefs = if tps > 0 { Some(tracefs::ensure()?) } else { None };
    for (i, s) in probes.specs.iter().enumerate() {
        let i = i as u64;
        let points: Vec<(&Point, u64)> = match &s.end {
            None => vec![(&s.begin, 0)],
            Some(e) => vec![(&s.begin, ROLE_BEGIN), (e, ROLE_END)],
        };
        for (p, role) in points {
            let stack = if p.stack && role == 0 { event::PROBE_STACK } else { 0 };
            let cookie = i | (role << 16) | stack | if role != 0 { i << 32 } else { 0 };
            links.push(attach_point(p, cookie, probes.binary.as_deref(), progs).with_context(|| format!("--probe '{}'", s.text))?);
        }
    }
    Ok(links)
}

fn attach_point(p: &Point, cookie: u64, binary: Option<&Path>, progs: &Progs<'_>) -> Result<Link> {
    if let Site::Tp { category, name } = &p.site {
        let fields = tracefs::fields(category, name, &p.fields)?;
        // struct wc_tp_fields: __u16 off[6]; __u8 size[6]; __u8 sign[6].
        let mut v = [0u8; 24];
        for (k, f) in fields.iter().enumerate() {
            v[2 * k..2 * k + 2].copy_from_slice(&f.off.to_ne_bytes());
            v[12 + k] = f.size;
            v[18 + k] = f.signed as u8;
        }
        let key = ((cookie & 0xffff) as u32).to_ne_bytes();
        libbpf_rs::MapCore::update(progs.tp_fields, &key, &v, libbpf_rs::MapFlags::ANY).context("tp_fields")?;
        let opts = libbpf_rs::TracepointOpts { cookie, ..Default::default() };
        let cat = libbpf_rs::TracepointCategory::Custom(category.clone());
        return progs.tp.attach_tracepoint_with_opts(cat, name, opts).map_err(|e| anyhow::anyhow!("no tracepoint {category}:{name} ({e})"));
    }
    if let Site::RawTp { name } = &p.site {
        let opts = libbpf_rs::RawTracepointOpts { cookie, ..Default::default() };
        return progs.raw_tp.attach_raw_tracepoint_with_opts(name, opts).map_err(|e| anyhow::anyhow!("no raw tracepoint {name} ({e})"));
    }
    let path = p.path.as_deref().or(binary).context("no file to probe: give path:FILE (or --probe-binary)")?;
    if !path.is_file() {
        anyhow::bail!("{}: no such file", path.display());
    }
    let pid = p.pid.unwrap_or(-1);
    let (func, off, retprobe) = match &p.site {
        Site::Entry { func, off } => (func, *off, false),
        Site::Return { func } => (func, 0, true),
        Site::RawTp { .. } | Site::Tp { .. } => unreachable!("attached above"),
        Site::Usdt { provider, name } => {
            return progs
                .usdt
                .attach_usdt_with_opts(pid, path, provider, name, UsdtOpts { cookie, ..Default::default() })
                .map_err(|e| anyhow::anyhow!("no USDT probe {provider}:{name} in {} ({e})", path.display()));
        }
    };
    let prog = if retprobe { progs.uretprobe } else { progs.uprobe };
    let opts = UprobeOpts { cookie, retprobe, func_name: Some(func.clone()), ..Default::default() };
    prog.attach_uprobe_with_opts(pid, path, off as usize, opts)
        .map_err(|e| anyhow::anyhow!("no function {func} to probe in {} ({e})", path.display()))
}

/// Firings a second past which the capture warns: a uprobe hit costs at
/// least 5 us (the trap into the kernel and back; `scripts/bench probes`
/// measured 30 us on a loaded 2-CPU VM, as much as bpftrace's empty
/// uprobe there), so 20,000 a second take a tenth of a CPU or more.
pub const WARN_RATE: u64 = 20_000;

/// The warning for a probe that fired `n` times in `secs` seconds, if over
/// [`WARN_RATE`].
pub fn rate_warning(spec: &str, n: u64, secs: f64) -> Option<String> {
    let rate = n as f64 / secs.max(1e-3);
    (rate > WARN_RATE as f64).then(|| {
        format!(
            "--probe '{spec}' fires {rate:.0} times a second (over {WARN_RATE}): at 5 us a hit or more, that is at least {:.0}% of a CPU taken from the target; probe a less frequent function",
            rate * 5e-6 * 100.0
        )
    })
}

/// The probe ring buffer's consumer.
pub struct Drain {
    events: Arc<Mutex<Vec<WcProbeEvent>>>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Drain {
    /// `tool` and `specs` name a probe in the rate warning, said once per
    /// probe in the capture's first second (a span's entry and exit are
    /// two hits per record).
    pub fn start(map: MapHandle, tool: &'static str, specs: &[Spec]) -> Result<Drain> {
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        let names: Vec<(String, u64)> = specs.iter().map(|s| (s.text.clone(), if s.is_span() { 2 } else { 1 })).collect();
        let mut hits = vec![0u64; names.len()];
        let mut first: Option<u64> = None;
        let mut warned = false;
        let mut b = RingBufferBuilder::new();
        b.add(&map, move |data: &[u8]| {
            if let Some(e) = event::from_bytes::<WcProbeEvent>(data) {
                let i = (e.cookie & 0xffff) as usize;
                if let (false, Some(h), Some((_, per))) = (warned, hits.get_mut(i), names.get(i)) {
                    *h += per;
                    let t0 = *first.get_or_insert(e.ts);
                    if e.ts - t0 >= 1_000_000_000 {
                        warned = true;
                        let secs = (e.ts - t0) as f64 / 1e9;
                        for ((spec, _), n) in names.iter().zip(&hits) {
                            if let Some(w) = rate_warning(spec, *n, secs) {
                                eprintln!("{tool}: warning: {w}");
                            }
                        }
                    }
                }
                sink.lock().unwrap().push(e);
            }
            0
        })?;
        let rb = b.build().context("opening the probe ring buffer")?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("probes".into())
            .spawn(move || {
                // The BPF side submits without waking us: read every 20 ms
                // (4 MiB hold 30k records, 0.7 s at the warning's rate).
                while !stopping.load(Ordering::Relaxed) {
                    let _ = rb.consume();
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = rb.consume();
                drop(map);
            })
            .context("starting the probe thread")?;
        Ok(Drain { events, stop, thread })
    }

    /// Every record sent until the stop (call after the window closed).
    pub fn finish(self) -> Vec<WcProbeEvent> {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        std::mem::take(&mut *self.events.lock().unwrap())
    }
}

fn args_of(p: &Point, e: &WcProbeEvent, into: &mut BTreeMap<String, i64>) {
    // tp:'s fields are read into the argument slots, in order.
    for (k, f) in p.fields.iter().enumerate() {
        into.insert(f.clone(), e.args[k] as i64);
    }
    for a in &p.args {
        let v = match a {
            Arg::N(n) => e.args[*n as usize],
            Arg::Ret => e.ret,
        };
        into.insert(a.name(), v as i64);
    }
}


/// The stacks of probes with `stack`, by their events' `stack` (raw
/// user addresses, root first, unwound as any stack of the capture).
#[derive(Default)]
pub struct Stacks(std::collections::HashMap<u64, (u32, Vec<u64>)>);

impl Stacks {
    /// Keep `data` if it is a probe's stack event (then true).
    pub fn event(&mut self, data: &[u8], unwind: &mut crate::unwind::Unwind) -> bool {
        let at = std::mem::offset_of!(event::WcEvent, kind);
        let kind = data.get(at..at + 4).map(|b| u32::from_ne_bytes(b.try_into().unwrap()));
        if kind != Some(event::KIND_PROBE) {
            return false;
        }
        if let Some(e) = event::WcEvent::parse(data) {
            // Its kernel stack is the breakpoint's handling: not the program's.
            self.0.insert(e.fp, (e.pid, unwind.event_stack(&e)));
        }
        true
    }
}

/// `slice_stack` ids of probe stacks: apart from the timeline's (low) and
/// gputrace's (top bit) in one trace.
const STACK_ID_BASE: u64 = 1 << 62;

/// The records of the probes' events, in time order (with `stack`, the
/// `slice_stack` records of their stacks first), and the counts for the
/// trailer (`probe_events`, `probe_drops`, ...).
pub fn records(probes: &Probes, mut events: Vec<WcProbeEvent>, stacks: &Stacks, counts: &[u64]) -> (Vec<Record>, Vec<(String, u64)>) {
    events.sort_by_key(|e| (e.ts, e.tid));
    let mut out = Vec::with_capacity(events.len());
    let mut ids: BTreeMap<(u32, Vec<u64>), u64> = BTreeMap::new();
    let mut stack_of = |fp: u64| -> Option<u64> {
        let (pid, u) = stacks.0.get(&fp)?;
        let n = STACK_ID_BASE + ids.len() as u64;
        Some(*ids.entry((*pid, u.clone())).or_insert(n))
    };
    for e in &events {
        let Some(s) = probes.specs.get((e.cookie & 0xffff) as usize) else { continue };
        let mut args = BTreeMap::new();
        if e.role == ROLE_END as u32 {
            args_of(&s.begin, e, &mut args);
            if let Some(end) = &s.end {
                args_of(end, e, &mut args);
            }
            let off = StateNs { r: e.off[0], s: e.off[1], d: e.off[2], other: e.off[3] };
            out.push(Record::Span(Span {
                name: spec::expand_name(&s.name, &args),
                pid: e.pid,
                tid: e.tid,
                start_ns: e.start,
                end_ns: e.ts,
                args,
                off_ns: off,
                depth: e.depth,
            }));
        } else {
            args_of(&s.begin, e, &mut args);
            let stack = (e.stack != 0).then(|| stack_of(e.stack)).flatten();
            let probe = spec::expand_name(&s.name, &args);
            out.push(Record::Probe(ProbeEvent { probe, pid: e.pid, tid: e.tid, ts_ns: e.ts, args, stack }));
        }
    }
    let defs = ids.into_iter().map(|((pid, ustack), id)| {
        Record::SliceStack(wallclock_stream::SliceStack { id, pid, ustack, kstack: Vec::new(), frames: Vec::new(), object: None })
    });
    let out: Vec<Record> = defs.chain(out).collect();
    let names = event::PROBE_STAT_NAMES;
    let counts = names.iter().zip(counts).map(|(n, v)| (n.to_string(), *v)).collect();
    (out, counts)
}

#[cfg(test)]
mod tests {
    #[test]
    fn warns_past_the_rate() {
        assert!(super::rate_warning("u:f", 10_000, 1.0).is_none());
        let w = super::rate_warning("u:f", 50_000, 1.0).unwrap();
        assert!(w.contains("u:f") && w.contains("50000 times a second") && w.contains("at least 25% of a CPU"), "{w}");
    }
}
