//! `--spans`: where the time of the program's spans went (the `span`
//! records of `offcputime --probe`), and of the slow ones above all.
//!
//! A span's times are exact as a thread's are: its off-CPU time by state
//! is the capture's measure (`span.off_ns`), its on-CPU time the rest of
//! its wall time. The stacks only divide those: off-CPU by the timeline's
//! blocks of the thread inside the span (`offcputime --timeline`), in
//! proportion within each state; on-CPU by the samples of the thread
//! inside the span (`oncputime --sample-events`). Time with no block or
//! no sample to divide it stays under `[off-CPU, no timeline]` or
//! `[on-CPU, not sampled]`, so every span still adds up to its wall time.

use std::collections::{BTreeMap, HashMap};

use stacksym::{Engine, Options};
use wallclock_stream::{Frame, Kind, Maps, Record, Slice, SliceStack, Span, Stack, State, StateNs};

use crate::functions::{by_function, FunctionTime};
use crate::modules::Modules;

/// oncputime's `--sample-events` records.
pub const SAMPLE_EVENT: &str = "[on-CPU sample]";

/// What the report says of one span name.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SpanReport {
    pub name: String,
    pub count: usize,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// `--slower-than` (None: every span counts as slow).
    pub threshold_ns: Option<u64>,
    pub slow: usize,
    pub slow_wall_ns: u64,
    pub slow_on_ns: u64,
    pub slow_off_ns: StateNs,
    /// The slow spans' time by own function (as a thread's).
    pub functions: Vec<FunctionTime>,
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// One input stream's timeline parts, its ids being its own.
#[derive(Default)]
struct Part {
    stacks: HashMap<u64, SliceStack>,
    /// tid -> its off-CPU slices, by start.
    blocks: HashMap<u32, Vec<Slice>>,
    /// tid -> (time, stack id) of its samples, by time.
    samples: HashMap<u32, Vec<(u64, u64)>>,
}

/// Everything `--spans` reads: the spans, and per input its timeline.
#[derive(Default)]
pub struct Input {
    spans: Vec<Span>,
    parts: Vec<Part>,
    maps: Vec<Maps>,
    comms: HashMap<u32, String>,
}

impl Input {
    /// Add one stream's records.
    pub fn add(&mut self, records: Vec<Record>) {
        let mut p = Part::default();
        for r in records {
            match r {
                Record::Span(s) => self.spans.push(s),
                Record::Slice(s) if s.kind == Kind::Off => p.blocks.entry(s.tid).or_default().push(s),
                Record::SliceStack(s) => {
                    p.stacks.insert(s.id, s);
                }
                Record::Probe(e) if e.probe == SAMPLE_EVENT => {
                    if let Some(id) = e.stack {
                        p.samples.entry(e.tid).or_default().push((e.ts_ns, id));
                    }
                }
                Record::Maps(m) => self.maps.push(m),
                Record::Thread(t) => {
                    self.comms.insert(t.tid, t.comm);
                }
                _ => {}
            }
        }
        p.blocks.values_mut().for_each(|v| v.sort_by_key(|s| s.start_ns));
        p.samples.values_mut().for_each(|v| v.sort_unstable());
        self.parts.push(p);
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
}

/// A stack inside slow spans: (span name, kind, state, part, stack id or
/// synthetic name) -> ns.
type Key = (String, Kind, Option<State>, usize, Result<u64, &'static str>);

/// The time of one span by stack, adding to its wall time.
fn divide(inp: &Input, s: &Span, into: &mut BTreeMap<Key, (u64, u64)>) {
    // Off-CPU: the blocks inside [start, end] by (state, stack), scaled per
    // state to the measured total.
    for st in State::ALL {
        let total = s.off_ns.get(st);
        if total == 0 {
            continue;
        }
        let mut parts: Vec<(usize, u64, u64)> = Vec::new();
        for (pi, p) in inp.parts.iter().enumerate() {
            let Some(v) = p.blocks.get(&s.tid) else { continue };
            let from = v.partition_point(|b| b.end_ns <= s.start_ns);
            for b in v[from..].iter().take_while(|b| b.start_ns < s.end_ns) {
                if b.state != Some(st) {
                    continue;
                }
                let ns = b.end_ns.min(s.end_ns).saturating_sub(b.start_ns.max(s.start_ns));
                if ns > 0 {
                    parts.push((pi, b.stack.unwrap_or(u64::MAX), ns));
                }
            }
        }
        let seen: u64 = parts.iter().map(|p| p.2).sum();
        if seen == 0 {
            let e = into.entry((s.name.clone(), Kind::Off, Some(st), 0, Err("[off-CPU, no timeline]"))).or_default();
            e.0 += total;
            e.1 += 1;
            continue;
        }
        let mut given = 0;
        for (i, (pi, id, ns)) in parts.iter().enumerate() {
            let share = if i + 1 == parts.len() { total - given } else { (total as u128 * *ns as u128 / seen as u128) as u64 };
            given += share;
            let e = into.entry((s.name.clone(), Kind::Off, Some(st), *pi, Ok(*id))).or_default();
            e.0 += share;
            e.1 += 1;
        }
    }
    // On-CPU: the samples inside [start, end] by stack.
    let on = s.on_ns();
    if on == 0 {
        return;
    }
    let mut hits: Vec<(usize, u64)> = Vec::new();
    for (pi, p) in inp.parts.iter().enumerate() {
        let Some(v) = p.samples.get(&s.tid) else { continue };
        let from = v.partition_point(|x| x.0 < s.start_ns);
        hits.extend(v[from..].iter().take_while(|x| x.0 <= s.end_ns).map(|x| (pi, x.1)));
    }
    if hits.is_empty() {
        let e = into.entry((s.name.clone(), Kind::On, None, 0, Err("[on-CPU, not sampled]"))).or_default();
        e.0 += on;
        return;
    }
    let n = hits.len() as u64;
    let mut given = 0;
    for (i, (pi, id)) in hits.iter().enumerate() {
        let share = if i as u64 + 1 == n { on - given } else { on / n };
        given += share;
        let e = into.entry((s.name.clone(), Kind::On, None, *pi, Ok(*id))).or_default();
        e.0 += share;
        e.1 += 1;
    }
}

/// The reports (one per span name, by name) and the slow spans' stacks,
/// each under a root naming its span, for the folded file.
pub fn build(inp: &Input, threshold_ns: Option<u64>) -> (Vec<SpanReport>, Vec<Stack>) {
    let mut by_name: BTreeMap<&str, Vec<&Span>> = BTreeMap::new();
    for s in &inp.spans {
        by_name.entry(&s.name).or_default().push(s);
    }
    let slow = |s: &Span| threshold_ns.is_none_or(|t| s.wall_ns() > t);
    let mut keyed: BTreeMap<Key, (u64, u64)> = BTreeMap::new();
    for s in inp.spans.iter().filter(|s| slow(s)) {
        divide(inp, s, &mut keyed);
    }
    // Name every stack once.
    let mut engine = Engine::new(Options { tool: "wcreport", ..Options::default() });
    let mut modules = Modules::default();
    for m in &inp.maps {
        engine.add_maps(m);
        modules.add(m);
    }
    let raw: HashMap<(usize, u64), Stack> = keyed
        .keys()
        .filter_map(|k| match k.4 {
            Ok(id) => {
                let ss = inp.parts.get(k.3)?.stacks.get(&id)?;
                let mut st = Stack::new(Kind::Off, ss.pid, 0, "");
                st.ustack = ss.ustack.clone();
                st.kstack = ss.kstack.clone();
                st.frames = ss.frames.clone();
                Some(((k.3, id), st))
            }
            Err(_) => None,
        })
        .collect();
    engine.prepare(raw.values().filter(|s| s.frames.is_empty()));
    let named: HashMap<(usize, u64), Vec<Frame>> =
        raw.iter().map(|(k, s)| (*k, if s.frames.is_empty() { engine.frames(s) } else { s.frames.clone() })).collect();
    let mut stacks = Vec::new();
    for ((name, kind, state, pi, id), (ns, count)) in keyed {
        let mut st = Stack::new(kind, 0, 0, &name);
        st.state = state;
        st.ns = ns;
        st.count = count;
        st.frames = match id {
            Ok(id) => {
                st.pid = inp.parts.get(pi).and_then(|p| p.stacks.get(&id)).map_or(0, |s| s.pid);
                named.get(&(pi, id)).cloned().unwrap_or_else(|| vec![Frame::named("[lost stack]")])
            }
            Err(synthetic) => vec![Frame::named(synthetic)],
        };
        stacks.push(st);
    }
    let mut reports = Vec::new();
    for (name, spans) in by_name {
        let mut walls: Vec<u64> = spans.iter().map(|s| s.wall_ns()).collect();
        walls.sort_unstable();
        let slow_spans: Vec<&&Span> = spans.iter().filter(|s| slow(s)).collect();
        let mut off = StateNs::default();
        slow_spans.iter().for_each(|s| off.add(&s.off_ns));
        let wall: u64 = slow_spans.iter().map(|s| s.wall_ns()).sum();
        let mine: Vec<&Stack> = stacks.iter().filter(|s| s.comm == name).collect();
        let comm = spans.first().and_then(|s| inp.comms.get(&s.tid)).cloned().unwrap_or_default();
        reports.push(SpanReport {
            name: name.to_string(),
            count: spans.len(),
            p50_ns: percentile(&walls, 0.50),
            p90_ns: percentile(&walls, 0.90),
            p99_ns: percentile(&walls, 0.99),
            max_ns: walls.last().copied().unwrap_or(0),
            threshold_ns,
            slow: slow_spans.len(),
            slow_wall_ns: wall,
            slow_on_ns: slow_spans.iter().map(|s| s.on_ns()).sum(),
            slow_off_ns: off,
            functions: by_function(&mine, &comm, Some(wall), &modules),
        });
    }
    (reports, stacks)
}

/// Folded lines of the slow spans' stacks: `SPAN;frames...;[state]_[o] US`
/// (root the span's name, leaf markers and µs as in PREFIX.folded).
pub fn folded(stacks: &[Stack]) -> String {
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for s in stacks {
        let mut frames = s.frames.clone();
        if let (Kind::Off, Some(st)) = (s.kind, s.state) {
            frames.push(Frame::named(st.leaf_name()));
        }
        let mut text = wallclock_stream::folded::stack_text(&[s.comm.as_str()], &frames);
        text.push_str(s.kind.marker());
        *lines.entry(text).or_default() += s.ns;
    }
    let mut out = String::new();
    for (text, ns) in lines {
        let us = (ns + 500) / 1000;
        if us > 0 {
            out.push_str(&format!("{text} {us}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!((percentile(&v, 0.5), percentile(&v, 0.9), percentile(&v, 0.99)), (50, 90, 99));
        assert_eq!(percentile(&[7], 0.99), 7);
        assert_eq!(percentile(&[], 0.5), 0);
    }
}
