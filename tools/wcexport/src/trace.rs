//! `--trace`: the timeline of a `--timeline` capture as Chrome trace-event
//! JSON (the JSON Object Format of the Trace Event Format), which
//! Perfetto UI (ui.perfetto.dev) and chrome://tracing open:
//!
//! - one process per captured process (`NAME (PID)`), one thread track
//!   per thread (its comm), sorted by tid;
//! - one complete event (`"ph":"X"`) per `slice` record, named by what
//!   the thread was doing: `running`, `runnable`, `sleeping`,
//!   `uninterruptible`, `other` (Perfetto colours a slice by its name, so
//!   each state has one colour; chrome://tracing takes `cname`);
//! - `args` of an off-CPU slice: `stack`, its frames leaf first (named
//!   in-process from the stream's maps, as stacksym would), and `where`,
//!   the innermost user function, `object`, what the block waited on
//!   (the stream's `object`: `file PATH`, `tcp 127.0.0.1:5432`, `pipe`,
//!   `lock g_lock`...; a lock known by its address named by its commonest
//!   call site, `lock in worker_loop`, its address in `object_raw`), and
//!   with `offcputime --wakers` `waker`
//!   (`comm (tid)`, `[timer]`, `[irq]`, `[softirq]`) and `waker_stack`,
//!   its frames leaf first; of a running slice the blocks under the
//!   capture's `--timeline-min` inside it (`short_blocks`, `short_us`);
//! - a flow arrow (`"ph":"s"` on the waker's track at the wake-up, `"ph":"f"`
//!   with `"bp":"e"` on the woken thread at its next running slice) per
//!   off-CPU slice a thread's wake-up ended;
//! - GPU activities on tracks of their own in the launching process
//!   (`GPU D stream S`), named by the kernel, with the launching thread
//!   and stack in `args`;
//! - with `--probe`, each probe firing an instant on its thread's track
//!   (with `stack` in its spec, its frames in `args.stack`)
//!   and each span a slice on a track of its own below the thread's
//!   (`COMM TID spans`), with its arguments and its time by state;
//! - `ts` and `dur` in µs (three decimals: the stream's ns) from the
//!   capture window's start; `metadata.wallclock` gives the window and
//!   what the timeline dropped (each drop is a gap in its thread's track).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use anyhow::{bail, Result};
use serde_json::{json, Value};
use stacksym::{Engine, Options};
use wallclock_stream::locks::LockSites;
use wallclock_stream::{Frame, Kind, Maps, Slice, Stack, State, Waker};

use crate::convert::Input;
use crate::trace_time::us;

/// Synthetic tids of GPU tracks: above any pid_max.
const GPU_TID_BASE: u64 = 1 << 32;
/// Synthetic tids of span tracks (one per thread with spans, beside it):
/// a span starts and ends inside the thread's running slices, so on the
/// thread's own track the two would not nest.
const SPAN_TID_BASE: u64 = 1 << 33;

/// The slice's name: its state (one colour per state), or the GPU activity.
fn name_of(s: &Slice) -> String {
    match s.kind {
        Kind::On => "running".into(),
        Kind::Off => s.state.map_or("off-CPU", State::label).into(),
        Kind::Gpu => s.gpu.as_ref().and_then(|g| g.name.clone().or(Some(g.activity.clone()))).unwrap_or_else(|| "gpu".into()),
        Kind::Other => "other".into(),
    }
}

/// chrome://tracing's colour for it (Perfetto ignores `cname`).
fn cname(s: &Slice) -> &'static str {
    match (s.kind, s.state) {
        (Kind::On, _) => "thread_state_running",
        (Kind::Off, Some(State::R)) => "thread_state_runnable",
        (Kind::Off, Some(State::S)) => "thread_state_sleeping",
        (Kind::Off, Some(State::D)) => "thread_state_iowait",
        (Kind::Gpu, _) => "olive",
        _ => "thread_state_unknown",
    }
}

fn frame_text(f: &Frame) -> String {
    if f.kernel {
        format!("{} [k]", f.func)
    } else {
        f.func.clone()
    }
}

/// A waker's stack: (pid, ustack, kstack).
type WakerStack = (u32, Vec<u64>, Vec<u64>);

fn waker_stack(w: &Waker) -> WakerStack {
    (w.pid, w.ustack.clone(), w.kstack.clone())
}

/// The waker as a slice's args name it: `comm (tid)`, or `[timer]`...
fn waker_label(w: &Waker) -> String {
    if w.context == "thread" {
        format!("{} ({})", if w.comm.is_empty() { "?" } else { &w.comm }, w.tid)
    } else {
        format!("[{}]", w.context)
    }
}

/// Frames of every slice stack, leaf first, by id; and of every waker's
/// stack (ids from u64::MAX down, by stack).
fn stacks(inp: &Input) -> (HashMap<u64, Vec<Frame>>, HashMap<WakerStack, u64>) {
    let mut engine = Engine::new(Options { tool: "wcexport", ..Options::default() });
    for (pid, maps) in &inp.maps {
        let names = inp.names.get(pid).cloned().unwrap_or_default();
        engine.add_maps(&Maps { pid: *pid, maps: maps.clone(), names, pgen: None });
    }
    let raw: Vec<(u64, Stack)> = inp
        .slice_stacks
        .iter()
        .filter(|s| s.frames.is_empty())
        .map(|s| {
            let mut st = Stack::new(Kind::Off, s.pid, 0, "");
            st.ustack = s.ustack.clone();
            st.kstack = s.kstack.clone();
            (s.id, st)
        })
        .collect();
    let mut raw = raw;
    let mut wids: HashMap<WakerStack, u64> = HashMap::new();
    for w in inp.slices.iter().filter_map(|s| s.waker.as_ref()) {
        if !w.frames.is_empty() || wids.contains_key(&waker_stack(w)) {
            continue;
        }
        let id = u64::MAX - wids.len() as u64;
        wids.insert(waker_stack(w), id);
        let mut st = Stack::new(Kind::Off, w.pid, w.tid, "");
        st.ustack = w.ustack.clone();
        st.kstack = w.kstack.clone();
        raw.push((id, st));
    }
    engine.prepare(raw.iter().map(|(_, s)| s));
    let mut out: HashMap<u64, Vec<Frame>> =
        raw.iter().map(|(id, s)| (*id, engine.frames(s))).collect();
    for s in inp.slice_stacks.iter().filter(|s| !s.frames.is_empty()) {
        out.insert(s.id, s.frames.clone());
    }
    for f in out.values_mut() {
        f.reverse();
    }
    (out, wids)
}

/// Write the trace of `inp`'s slices to `out`.
pub fn write(inp: &Input, out: &mut dyn Write) -> Result<()> {
    if inp.slices.is_empty() {
        bail!("the input holds no timeline (slice records): capture with `offcputime --timeline` (or `wallclock --timeline`)");
    }
    let t0 = inp
        .header
        .as_ref()
        .and_then(|h| h.start_ns)
        .unwrap_or_else(|| inp.slices.iter().map(|s| s.start_ns).min().unwrap_or(0));
    let (frames, wids) = stacks(inp);
    let mut flows = 0u64;
    let pnames = inp.process_names();
    let comms: HashMap<u32, &str> = inp.threads.iter().map(|t| (t.tid, t.comm.as_str())).collect();
    let mut events: Vec<Value> = Vec::new();
    let mut tracks: BTreeMap<(u32, u64), String> = BTreeMap::new();
    let objects = slice_objects(inp, &frames);
    let ctx = SliceContext { t0, frames: &frames, wids: &wids, comms: &comms, objects: &objects };
    for s in &inp.slices {
        ctx.events(s, &mut tracks, &mut flows, &mut events);
    }
    let gpu_track = |s: &Slice| {
        let (d, st) = s.gpu.as_ref().map_or((0, 0), |g| (g.device.unwrap_or(0), g.stream.unwrap_or(0)));
        GPU_TID_BASE + ((d as u64) << 24) + st as u64
    };
    events.extend(crate::trace_gpu::idle_gaps(&inp.slices, t0, &gpu_track));
    probe_events(inp, t0, &comms, &frames, &mut tracks, &mut events);
    let meta = track_meta(&tracks, &pnames);
    let info = info(inp, t0);
    // Streamed event by event: a timeline has millions of them.
    write!(out, "{{\"displayTimeUnit\":\"ns\",\"metadata\":{{\"wallclock\":{}}},\"traceEvents\":[", Value::Object(info))?;
    for (i, e) in meta.iter().chain(events.iter()).enumerate() {
        if i > 0 {
            out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut *out, e)?;
    }
    out.write_all(b"]}\n")?;
    out.flush()?;
    Ok(())
}

/// What the blocks at each slice stack waited on, by its id: its
/// `object`, and where a lock known by its address is named by its call
/// site over the slices' time (`wallclock_stream::locks`, as stackmerge
/// names it over the summed stacks), that name with the address after it.
fn slice_objects<'a>(inp: &'a Input, frames: &HashMap<u64, Vec<Frame>>) -> HashMap<u64, (String, Option<&'a str>)> {
    let mut ns: HashMap<u64, u64> = HashMap::new();
    for s in inp.slices.iter().filter(|s| s.kind == Kind::Off) {
        if let Some(id) = s.stack {
            *ns.entry(id).or_default() += s.end_ns.saturating_sub(s.start_ns);
        }
    }
    let mut sites = LockSites::default();
    for s in &inp.slice_stacks {
        if let (Some(o), Some(f)) = (s.object.as_deref(), frames.get(&s.id)) {
            sites.add((s.pid, 0), o, f, ns.get(&s.id).copied().unwrap_or(0));
        }
    }
    let names = sites.names();
    inp.slice_stacks
        .iter()
        .filter_map(|s| {
            let o = s.object.as_deref()?;
            Some((s.id, match names.get((s.pid, 0), o) {
                Some(name) => (name.to_string(), Some(o)),
                None => (o.to_string(), None),
            }))
        })
        .collect()
}

/// What a slice's event needs besides the slice.
struct SliceContext<'a> {
    t0: u64,
    frames: &'a HashMap<u64, Vec<Frame>>,
    wids: &'a HashMap<WakerStack, u64>,
    comms: &'a HashMap<u32, &'a str>,
    /// What the blocks at a slice stack waited on, by its id, and the
    /// capture's own name of a lock named by its call site.
    objects: &'a HashMap<u64, (String, Option<&'a str>)>,
}

impl SliceContext<'_> {
    /// The slice's complete event (on its thread's track, or its GPU
    /// stream's), with its arguments, then a wake-up flow's two ends when
    /// a thread woke it.
    fn events(&self, s: &Slice, tracks: &mut BTreeMap<(u32, u64), String>, flows: &mut u64, events: &mut Vec<Value>) {
        let mut flow: Vec<Value> = Vec::new();
        let tid = match (s.kind, &s.gpu) {
            (Kind::Gpu, g) => {
                let (d, st) = g.as_ref().map_or((0, 0), |g| (g.device.unwrap_or(0), g.stream.unwrap_or(0)));
                let t = GPU_TID_BASE + ((d as u64) << 24) + st as u64;
                tracks.entry((s.pid, t)).or_insert_with(|| format!("GPU {d} stream {st}"));
                t
            }
            _ => {
                let comm = self.comms.get(&s.tid).copied().unwrap_or("?");
                tracks.entry((s.pid, s.tid as u64)).or_insert_with(|| format!("{comm} {}", s.tid));
                s.tid as u64
            }
        };
        let mut args = serde_json::Map::new();
        if let Some(st) = s.state {
            args.insert("state".into(), json!(st.label()));
        }
        if let Some(f) = s.stack.and_then(|id| self.frames.get(&id)) {
            if let Some(w) = f.iter().find(|f| !f.kernel && !f.func.starts_with('[')) {
                args.insert("where".into(), json!(w.func));
            }
            args.insert("stack".into(), json!(f.iter().map(frame_text).collect::<Vec<_>>()));
        }
        if let Some((o, raw)) = s.stack.and_then(|id| self.objects.get(&id)) {
            args.insert("object".into(), json!(o));
            if let Some(raw) = raw {
                args.insert("object_raw".into(), json!(raw));
            }
        }
        if let Some(w) = &s.waker {
            args.insert("waker".into(), json!(waker_label(w)));
            let wf = if w.frames.is_empty() { self.wids.get(&waker_stack(w)).and_then(|id| self.frames.get(id)) } else { None };
            let wf: Vec<String> = match wf {
                Some(f) => f.iter().map(frame_text).collect(),
                None => w.frames.iter().rev().map(frame_text).collect(),
            };
            if !wf.is_empty() {
                args.insert("waker_stack".into(), json!(wf));
            }
            if w.context == "thread" && w.tid != 0 {
                // A flow arrow from the waker's track at the wake-up (the
                // slice's end) to the woken thread's next running slice.
                *flows += 1;
                let ts = us(s.end_ns.saturating_sub(self.t0));
                let wpid = if w.pid != 0 { w.pid } else { s.pid };
                flow.push(json!({"ph": "s", "name": "wake-up", "cat": "wake", "id": *flows, "pid": wpid, "tid": w.tid, "ts": ts}));
                flow.push(json!({"ph": "f", "bp": "e", "name": "wake-up", "cat": "wake", "id": *flows, "pid": s.pid, "tid": s.tid, "ts": ts}));
            }
        }
        if s.kind == Kind::Gpu {
            args.insert("launched_by_tid".into(), json!(s.tid));
        }
        if s.short_blocks > 0 {
            args.insert("short_blocks".into(), json!(s.short_blocks));
            args.insert("short_us".into(), us(s.short_ns));
        }
        events.push(json!({
            "ph": "X",
            "name": name_of(s),
            "cat": match s.kind { Kind::On => "on", Kind::Off => "off", Kind::Gpu => "gpu", Kind::Other => "other" },
            "cname": cname(s),
            "pid": s.pid,
            "tid": tid,
            "ts": us(s.start_ns.saturating_sub(self.t0)),
            "dur": us(s.end_ns.saturating_sub(s.start_ns)),
            "args": Value::Object(args),
        }));
        events.append(&mut flow);
    }
}

/// The metadata events: each process's name, each track's name and order.
fn track_meta(tracks: &BTreeMap<(u32, u64), String>, pnames: &HashMap<u32, String>) -> Vec<Value> {
    let mut meta: Vec<Value> = Vec::new();
    let pids: std::collections::BTreeSet<u32> = tracks.keys().map(|(p, _)| *p).collect();
    for pid in pids {
        let name = pnames.get(&pid).cloned().unwrap_or_else(|| "process".into());
        meta.push(json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": format!("{name} ({pid})")}}));
    }
    for ((pid, tid), name) in tracks {
        // A span track right below its thread's.
        let sort = if *tid >= SPAN_TID_BASE && *tid < GPU_TID_BASE * 4 { (*tid - SPAN_TID_BASE) * 2 + 1 } else { tid * 2 };
        meta.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}));
        meta.push(json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": sort}}));
    }
    meta
}

/// The trace's own metadata: its clock, start, window and timeline counts.
fn info(inp: &Input, t0: u64) -> serde_json::Map<String, Value> {
    let mut info = serde_json::Map::new();
    info.insert("clock".into(), json!("monotonic"));
    info.insert("start_ns".into(), json!(t0));
    if let Some((s, e)) = inp.window() {
        info.insert("window_ns".into(), json!(e.saturating_sub(s)));
    }
    if let Some(st) = &inp.stats {
        for (k, v) in st.counts.iter().filter(|(k, _)| k.starts_with("timeline_")) {
            info.insert(k.clone(), json!(v));
        }
    }
    info
}

/// The program's own events (`--probe`): each probe firing an instant
/// (`"ph":"i"`, thread scope) on its thread's track with its arguments;
/// each span a complete event on the thread's span track (`COMM TID
/// spans`), with its arguments, its on-CPU time and its off-CPU time by
/// state. `oncputime --sample-events`' samples are not drawn.
fn probe_events(
    inp: &Input,
    t0: u64,
    comms: &HashMap<u32, &str>,
    frames: &HashMap<u64, Vec<Frame>>,
    tracks: &mut BTreeMap<(u32, u64), String>,
    events: &mut Vec<Value>,
) {
    for e in inp.probes.iter().filter(|e| !e.probe.starts_with('[')) {
        let comm = comms.get(&e.tid).copied().unwrap_or("?");
        tracks.entry((e.pid, e.tid as u64)).or_insert_with(|| format!("{comm} {}", e.tid));
        let mut args = serde_json::Map::new();
        for (k, v) in &e.args {
            args.insert(k.clone(), json!(v));
        }
        // `stack` in the spec: its frames, leaf first, as an off-CPU slice's.
        if let Some(f) = e.stack.and_then(|id| frames.get(&id)) {
            args.insert("stack".into(), json!(f.iter().map(frame_text).collect::<Vec<_>>()));
        }
        events.push(json!({
            "ph": "i", "s": "t", "name": e.probe, "cat": "probe", "pid": e.pid, "tid": e.tid,
            "ts": us(e.ts_ns.saturating_sub(t0)), "args": Value::Object(args),
        }));
    }
    for sp in &inp.spans {
        let comm = comms.get(&sp.tid).copied().unwrap_or("?");
        let track = SPAN_TID_BASE + sp.tid as u64;
        tracks.entry((sp.pid, track)).or_insert_with(|| format!("{comm} {} spans", sp.tid));
        let mut args = serde_json::Map::new();
        for (k, v) in &sp.args {
            args.insert(k.clone(), json!(v));
        }
        args.insert("tid".into(), json!(sp.tid));
        args.insert("on_cpu_us".into(), us(sp.on_ns()));
        for st in State::ALL {
            args.insert(format!("{}_us", st.label()), us(sp.off_ns.get(st)));
        }
        events.push(json!({
            "ph": "X", "name": sp.name, "cat": "span", "pid": sp.pid, "tid": track,
            "ts": us(sp.start_ns.saturating_sub(t0)), "dur": us(sp.wall_ns()), "args": Value::Object(args),
        }));
    }
}
