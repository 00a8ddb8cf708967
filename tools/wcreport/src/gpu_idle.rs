//! Why the GPU sat idle: per device (and stream), its busy and idle time
//! over the span from its first activity to its last in the window, and what each thread that launches work on it was
//! doing while it was idle: on-CPU, or off-CPU in which state and where.
//!
//! Needs intervals on both sides, so it needs the timelines:
//! `gputrace --timeline` (each activity's start and end) and `offcputime
//! --timeline` (each thread's running and blocked slices, blocks with
//! their stacks), given to wcreport with `--timeline-from` (scripts/wallclock
//! `--gpu --timeline` does it). Without them there is no idle section.
//!
//! The rule for "a thread that launches work on that GPU": a thread that
//! made the API call of at least one kernel, copy or memset that ran on
//! the device in the window (the launching thread of the activity's
//! correlation id, as gputrace records it).
//!
//! Running slices carry no stack: the on-CPU time inside the idle
//! intervals is exact, and it is named by the thread's on-CPU functions
//! over the whole window (its samples), said so in the output.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use stacksym::{Engine, Options};
use wallclock_stream::{Frame, Kind, Record, Slice, Stack, State};

use crate::functions::classify;
use crate::model::{ThreadReport, Window};

pub const RULE: &str = "threads that issued at least one kernel, copy or memset that ran on the GPU in the window";

#[derive(Debug, Clone, Default, Serialize)]
pub struct DeviceIdle {
    pub device: Option<u32>,
    /// From its first activity's start to its last's end, in the window.
    pub window_ns: u64,
    /// The union of its activities' intervals (concurrent ones once).
    pub busy_ns: u64,
    pub idle_ns: u64,
    pub idle_pct: Option<f64>,
    pub streams: Vec<StreamIdle>,
    pub threads: Vec<IdleThread>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct StreamIdle {
    pub stream: Option<u32>,
    pub busy_ns: u64,
    pub idle_ns: u64,
}

/// What one launching thread did during the device's idle time.
#[derive(Debug, Clone, Default, Serialize)]
pub struct IdleThread {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub launches: u64,
    pub on_ns: u64,
    /// Its on-CPU functions over the whole window: (function, % of its on-CPU time).
    pub on_functions: Vec<(String, f64)>,
    /// Off-CPU time by state and place, heaviest first.
    pub off: Vec<IdleWait>,
    /// Off-CPU time waiting for CPython's GIL (inside `off` too).
    pub gil_ns: u64,
    /// Idle time its timeline does not cover (not alive, or dropped).
    pub uncovered_ns: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct IdleWait {
    pub state: Option<State>,
    /// `function → call → [state] reason`.
    pub place: String,
    pub ns: u64,
}

/// Sorted, merged intervals.
fn union(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (a, b) in v {
        match out.last_mut() {
            Some(l) if a <= l.1 => l.1 = l.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

fn clip(v: &[(u64, u64)], lo: u64, hi: u64) -> Vec<(u64, u64)> {
    v.iter().map(|&(a, b)| (a.max(lo), b.min(hi))).filter(|(a, b)| a < b).collect()
}

fn complement(busy: &[(u64, u64)], lo: u64, hi: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut t = lo;
    for &(a, b) in busy {
        if a > t {
            out.push((t, a));
        }
        t = t.max(b);
    }
    if hi > t {
        out.push((t, hi));
    }
    out
}

fn len(v: &[(u64, u64)]) -> u64 {
    v.iter().map(|(a, b)| b - a).sum()
}

/// Overlap of [a, b) with sorted disjoint intervals.
fn overlap(v: &[(u64, u64)], a: u64, b: u64) -> u64 {
    let i = v.partition_point(|&(_, e)| e <= a);
    v[i..].iter().take_while(|&&(s, _)| s < b).map(|&(s, e)| e.min(b).saturating_sub(s.max(a))).sum()
}

fn is_device_work(s: &Slice) -> bool {
    s.kind == Kind::Gpu && s.gpu.as_ref().is_some_and(|g| g.activity != "sync")
}

/// Named frames (root first) of every slice stack.
fn slice_frames(records: &[Record]) -> HashMap<u64, Vec<Frame>> {
    let mut engine = Engine::new(Options { tool: "wcreport", ..Options::default() });
    let mut raw: Vec<(u64, Stack)> = Vec::new();
    let mut out = HashMap::new();
    for r in records {
        match r {
            Record::Maps(m) => engine.add_maps(m),
            Record::SliceStack(s) if s.frames.is_empty() => {
                let mut st = Stack::new(Kind::Off, s.pid, 0, "");
                st.ustack = s.ustack.clone();
                st.kstack = s.kstack.clone();
                raw.push((s.id, st));
            }
            Record::SliceStack(s) => {
                out.insert(s.id, s.frames.clone());
            }
            _ => {}
        }
    }
    engine.prepare(raw.iter().map(|(_, s)| s));
    for (id, s) in &raw {
        out.insert(*id, engine.frames(s));
    }
    out
}

/// The idle view, one entry per device; empty without GPU slices.
pub fn build(records: &[Record], w: &Window, threads: &[ThreadReport]) -> Vec<DeviceIdle> {
    let slices: Vec<&Slice> = records.iter().filter_map(|r| if let Record::Slice(s) = r { Some(s) } else { None }).collect();
    let gpu: Vec<&&Slice> = slices.iter().filter(|s| is_device_work(s)).collect();
    if gpu.is_empty() {
        return Vec::new();
    }
    // The span from the first activity to the last, inside the window: a
    // launched program's start-up, and the capture's own edges, are not
    // time the GPU waited for its launchers.
    let first = gpu.iter().map(|s| s.start_ns).min().unwrap_or(0);
    let last = gpu.iter().map(|s| s.end_ns).max().unwrap_or(0);
    let lo = w.start_ns.map_or(first, |s| s.max(first));
    let hi = w.end_ns.map_or(last, |e| e.min(last)).max(lo);
    let frames = slice_frames(records);
    let comms: HashMap<(u32, u32), &ThreadReport> = threads.iter().map(|t| ((t.pid, t.tid), t)).collect();
    let mut by_dev: BTreeMap<Option<u32>, Vec<&Slice>> = BTreeMap::new();
    for s in &gpu {
        by_dev.entry(s.gpu.as_ref().and_then(|g| g.device)).or_default().push(s);
    }
    let mut out = Vec::new();
    for (device, acts) in by_dev {
        let busy = clip(&union(acts.iter().map(|s| (s.start_ns, s.end_ns)).collect()), lo, hi);
        let idle = complement(&busy, lo, hi);
        let mut d = DeviceIdle { device, window_ns: hi - lo, busy_ns: len(&busy), idle_ns: len(&idle), ..Default::default() };
        d.idle_pct = (d.window_ns > 0).then(|| d.idle_ns as f64 * 100.0 / d.window_ns as f64);
        let mut streams: BTreeMap<Option<u32>, Vec<(u64, u64)>> = BTreeMap::new();
        let mut launchers: BTreeMap<(u32, u32), u64> = BTreeMap::new();
        for s in &acts {
            streams.entry(s.gpu.as_ref().and_then(|g| g.stream)).or_default().push((s.start_ns, s.end_ns));
            if s.tid != 0 {
                *launchers.entry((s.pid, s.tid)).or_default() += 1;
            }
        }
        d.streams = streams
            .into_iter()
            .map(|(stream, v)| {
                let b = len(&clip(&union(v), lo, hi));
                StreamIdle { stream, busy_ns: b, idle_ns: (hi - lo) - b }
            })
            .collect();
        for ((pid, tid), launches) in launchers {
            d.threads.push(thread_in_idle(pid, tid, launches, &slices, &idle, &frames, comms.get(&(pid, tid)).copied()));
        }
        out.push(d);
    }
    out
}

fn thread_in_idle(
    pid: u32,
    tid: u32,
    launches: u64,
    slices: &[&Slice],
    idle: &[(u64, u64)],
    frames: &HashMap<u64, Vec<Frame>>,
    t: Option<&ThreadReport>,
) -> IdleThread {
    let comm = t.map(|t| t.comm.clone()).unwrap_or_default();
    let mut it = IdleThread { pid, tid, comm: comm.clone(), launches, ..Default::default() };
    let mut covered = 0u64;
    let mut waits: BTreeMap<(Option<State>, String), u64> = BTreeMap::new();
    for s in slices.iter().filter(|s| s.pid == pid && s.tid == tid && s.kind != Kind::Gpu) {
        let ns = overlap(idle, s.start_ns, s.end_ns);
        if ns == 0 {
            continue;
        }
        covered += ns;
        if s.kind == Kind::On {
            it.on_ns += ns;
            continue;
        }
        let f: &[Frame] = s.stack.and_then(|id| frames.get(&id)).map(Vec::as_slice).unwrap_or(&[]);
        let mut st = Stack::new(Kind::Off, pid, tid, &comm);
        st.state = s.state;
        let (who, call, reason) = classify(&st, f, &comm);
        if call.as_deref() == Some(wallclock_stream::accounting::GIL_FRAME) {
            it.gil_ns += ns;
        }
        let tag = s.state.map_or("[off-CPU]".to_string(), |x| format!("[{x:?}]"));
        let mut segs = vec![who.func];
        segs.extend(call);
        segs.push(match reason {
            Some(r) => format!("{tag} {r}"),
            None => tag,
        });
        *waits.entry((s.state, segs.join(" → "))).or_default() += ns;
    }
    it.uncovered_ns = len(idle).saturating_sub(covered);
    it.off = waits.into_iter().map(|((state, place), ns)| IdleWait { state, place, ns }).collect();
    it.off.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.place.cmp(&b.place)));
    if let Some(t) = t {
        let mut on: BTreeMap<String, u64> = BTreeMap::new();
        for f in &t.functions {
            for p in f.parts.iter().filter(|p| p.kind == Kind::On) {
                *on.entry(f.func.clone()).or_default() += p.ns;
            }
        }
        let total: u64 = on.values().sum();
        let mut v: Vec<(String, f64)> =
            on.into_iter().filter(|_| total > 0).map(|(f, ns)| (f, ns as f64 * 100.0 / total as f64)).collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v.truncate(3);
        it.on_functions = v;
    }
    it
}
