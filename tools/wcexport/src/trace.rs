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
//!   the innermost user function; of a running slice the blocks under the
//!   capture's `--timeline-min` inside it (`short_blocks`, `short_us`);
//! - GPU activities on tracks of their own in the launching process
//!   (`GPU D stream S`), named by the kernel, with the launching thread
//!   and stack in `args`;
//! - `ts` and `dur` in µs (three decimals: the stream's ns) from the
//!   capture window's start; `metadata.wallclock` gives the window and
//!   what the timeline dropped (each drop is a gap in its thread's track).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use anyhow::{bail, Result};
use serde_json::{json, Value};
use stacksym::{Engine, Options};
use wallclock_stream::{Frame, Kind, Maps, Slice, Stack, State};

use crate::convert::Input;

/// Synthetic tids of GPU tracks: above any pid_max.
const GPU_TID_BASE: u64 = 1 << 32;

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

/// ns as µs with three decimals, exact.
fn us(ns: u64) -> Value {
    let text = format!("{}.{:03}", ns / 1000, ns % 1000);
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

fn frame_text(f: &Frame) -> String {
    if f.kernel {
        format!("{} [k]", f.func)
    } else {
        f.func.clone()
    }
}

/// Frames of every slice stack, leaf first, by id.
fn stacks(inp: &Input) -> HashMap<u64, Vec<Frame>> {
    let mut engine = Engine::new(Options { tool: "wcexport", ..Options::default() });
    for (pid, maps) in &inp.maps {
        let names = inp.names.get(pid).cloned().unwrap_or_default();
        engine.add_maps(&Maps { pid: *pid, maps: maps.clone(), names });
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
    engine.prepare(raw.iter().map(|(_, s)| s));
    let mut out: HashMap<u64, Vec<Frame>> =
        raw.iter().map(|(id, s)| (*id, engine.frames(s))).collect();
    for s in inp.slice_stacks.iter().filter(|s| !s.frames.is_empty()) {
        out.insert(s.id, s.frames.clone());
    }
    for f in out.values_mut() {
        f.reverse();
    }
    out
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
    let frames = stacks(inp);
    let pnames = inp.process_names();
    let comms: HashMap<u32, &str> = inp.threads.iter().map(|t| (t.tid, t.comm.as_str())).collect();
    let mut events: Vec<Value> = Vec::new();
    let mut tracks: BTreeMap<(u32, u64), String> = BTreeMap::new();
    for s in &inp.slices {
        let tid = match (s.kind, &s.gpu) {
            (Kind::Gpu, g) => {
                let (d, st) = g.as_ref().map_or((0, 0), |g| (g.device.unwrap_or(0), g.stream.unwrap_or(0)));
                let t = GPU_TID_BASE + ((d as u64) << 24) + st as u64;
                tracks.entry((s.pid, t)).or_insert_with(|| format!("GPU {d} stream {st}"));
                t
            }
            _ => {
                let comm = comms.get(&s.tid).copied().unwrap_or("?");
                tracks.entry((s.pid, s.tid as u64)).or_insert_with(|| format!("{comm} {}", s.tid));
                s.tid as u64
            }
        };
        let mut args = serde_json::Map::new();
        if let Some(st) = s.state {
            args.insert("state".into(), json!(st.label()));
        }
        if let Some(f) = s.stack.and_then(|id| frames.get(&id)) {
            if let Some(w) = f.iter().find(|f| !f.kernel && !f.func.starts_with('[')) {
                args.insert("where".into(), json!(w.func));
            }
            args.insert("stack".into(), json!(f.iter().map(frame_text).collect::<Vec<_>>()));
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
            "ts": us(s.start_ns.saturating_sub(t0)),
            "dur": us(s.end_ns.saturating_sub(s.start_ns)),
            "args": Value::Object(args),
        }));
    }
    let mut meta: Vec<Value> = Vec::new();
    let pids: std::collections::BTreeSet<u32> = tracks.keys().map(|(p, _)| *p).collect();
    for pid in pids {
        let name = pnames.get(&pid).cloned().unwrap_or_else(|| "process".into());
        meta.push(json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": format!("{name} ({pid})")}}));
    }
    for ((pid, tid), name) in &tracks {
        meta.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}));
        meta.push(json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}));
    }
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
