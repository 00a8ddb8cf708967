//! The accounting itself: records in, per-process and per-thread figures out.

use std::collections::BTreeMap;

use serde::Serialize;
use wallclock_stream::accounting::{behaviour, kind_leaf, merge_thread, role_for, sampled_on_ns, scale_samples};
use wallclock_stream::pgen::pgen_of;
use wallclock_stream::{Frame, Header, Kind, Record, Stack, State, StateNs, Thread};

use crate::functions::by_function;
use crate::gpu::{self, GpuReport};
use crate::modules::Modules;
use crate::names::{unnamed_modules, UnnamedModule};

/// Frame names of the synthetic stacks that keep time nobody could attribute.
pub const SHORT_BLOCKS: &str = "[short blocks]";
pub const LOST_STACK: &str = "[lost stack]";
pub use wallclock_stream::accounting::GIL_FRAME;

pub use crate::model::{ProcessReport, ThreadKey, ThreadReport, TopStack, TopStacks, Window};
use crate::model::pct;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Producing tools of the inputs, in order.
    pub tools: Vec<String>,
    pub window: Window,
    /// The header's lost counts, summed over inputs.
    pub lost: BTreeMap<String, u64>,
    /// The trailer's counts, summed over inputs.
    pub stats: BTreeMap<String, u64>,
    pub short_blocks_ns: u64,
    pub lost_stack_ns: u64,
    /// Heaviest first (thread-time, then on-CPU time, then pid).
    pub processes: Vec<ProcessReport>,
    pub threads: Vec<ThreadReport>,
    /// Modules whose code ran without a name (see [`crate::names`]).
    pub unnamed: Vec<UnnamedModule>,
    /// What JIT runtimes among the processes need for whole, named
    /// stacks (see [`crate::runtimes`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runtimes: Vec<crate::runtimes::RuntimeAdvice>,
    /// Present whenever the input has GPU records or `gpu_*` counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuReport>,
    /// Who waits on whom (captures with wakers), heaviest pairs first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waits_on: Vec<crate::wakers::WaitsOn>,
    /// What the off-CPU time waited on (stream 1.6's objects), heaviest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waited_on: Vec<crate::objects::WaitedOn>,
    /// The event an `oncputime -e` profile counts: every `*_ns` value of
    /// its stacks and threads is then a count of it, not time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// With `event`: one sample every this many events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_period: Option<u64>,
    /// What the kernel could not give the capture (the headers').
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kernel_lacks: Vec<String>,
}

/// Frames of a stack for display: frames, else hex addresses.
pub fn display_frames(s: &Stack) -> Vec<Frame> {
    wallclock_stream::folded::frames_or_addresses(s).into_owned()
}

/// The stack's folded text (the one rule every tool writes), its kind's
/// leaf appended once.
fn stack_text(s: &Stack) -> String {
    let mut frames = display_frames(s);
    if let Some(leaf) = kind_leaf(s) {
        let tail: Vec<&str> = frames[frames.len().saturating_sub(2)..].iter().map(|f| f.func.as_str()).collect();
        if tail.last() != Some(&leaf.as_str()) && !(s.kind == Kind::Off && wallclock_stream::accounting::ends_in_state_leaf(&tail)) {
            frames.push(Frame::named(leaf));
            if let (Kind::Off, Some(o)) = (s.kind, &s.object) {
                frames.push(Frame::named(wallclock_stream::accounting::object_frame(o)));
            }
        }
    }
    wallclock_stream::folded::stack_text::<&str>(&[], &frames)
}

/// Build the report from records (headers included, in input order).
pub fn build(records: &[Record], top_n: usize) -> Report {
    let Gathered { mut threads, stacks, headers, stats, modules, stats_end_ns } = gather(records);
    let mut window = Window { end_ns: stats_end_ns, ..Window::default() };
    let Headers { tools, lost, event, event_period, kernel_lacks, runtime_versions } = headers_of(&headers, &mut window);
    window.wall_ns = match (window.start_ns, window.end_ns) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    for (k, ss) in &stacks {
        let comm = ss.iter().map(|s| s.comm.as_str()).find(|c| !c.is_empty()).unwrap_or("");
        threads.entry(*k).or_insert_with(|| Thread { pgen: (k.1 > 0).then_some(k.1), ..Thread::new(k.0, k.2, comm) });
    }

    // An event profile's threads have no time to share out: their shares
    // are of their own events (no window bounds a count of page faults).
    let thread_window = if event.is_some() { Window::default() } else { window.clone() };
    let mut out_threads = Vec::new();
    for (k, t) in &threads {
        let ss: &[&Stack] = stacks.get(k).map(Vec::as_slice).unwrap_or(&[]);
        out_threads.push(thread_report(t, ss, &thread_window, top_n, &modules));
    }
    let inside = crate::names::inside_time(stacks.values().flatten().copied(), |pid, m| modules.path(pid, m).map(str::to_string));
    let unnamed = unnamed_modules(out_threads.iter().flat_map(|t| &t.functions), &inside, &modules.build_ids);
    for t in &mut out_threads {
        let rest = t.functions.split_off(top_n.min(t.functions.len()));
        t.functions_rest = rest.len();
        t.functions_rest_ns = rest.iter().map(|f| f.ns).sum();
    }
    let processes = crate::process::processes(&out_threads, &threads, &window);
    let short_blocks_ns = out_threads.iter().map(|t| t.short_blocks_ns).sum();
    let lost_stack_ns = out_threads.iter().map(|t| t.lost_stack_ns).sum();
    let comms: BTreeMap<(u32, u32), String> = threads.iter().map(|(k, t)| ((k.0, k.2), t.comm.clone())).collect();
    let all: Vec<&Stack> = stacks.values().flatten().copied().collect();
    let mut gpu = gpu::build(&all, &comms, &stats, &lost, top_n);
    if let Some(g) = gpu.as_mut() {
        g.idle = crate::gpu_idle::build(records, &window, &out_threads);
    }
    let waits_on = crate::wakers::waits_on(&all, &comms, top_n.max(10) * 2);
    let waited_on = crate::objects::waited_on(&all, &comms, top_n.max(10) * 2);
    let runtimes = crate::runtimes::advice(all.iter().copied(), runtime_versions.as_ref());
    Report {
        tools,
        window,
        lost,
        stats,
        short_blocks_ns,
        lost_stack_ns,
        processes,
        threads: out_threads,
        unnamed,
        runtimes,
        gpu,
        waits_on,
        waited_on,
        event,
        event_period,
        kernel_lacks,
    }
}

/// The records sorted by what they are.
struct Gathered<'a> {
    /// A thread is (pid, pgen, tid): two processes of one pid stay two.
    threads: BTreeMap<ThreadKey, Thread>,
    stacks: BTreeMap<ThreadKey, Vec<&'a Stack>>,
    headers: Vec<&'a Header>,
    stats: BTreeMap<String, u64>,
    modules: Modules,
    /// The first trailer's end.
    stats_end_ns: Option<u64>,
}

fn gather(records: &[Record]) -> Gathered<'_> {
    let mut g = Gathered {
        threads: BTreeMap::new(),
        stacks: BTreeMap::new(),
        headers: Vec::new(),
        stats: BTreeMap::new(),
        modules: Modules::default(),
        stats_end_ns: None,
    };
    for r in records {
        match r {
            Record::Header(h) => g.headers.push(h),
            Record::Thread(t) => {
                let e = g.threads.entry((t.pid, pgen_of(t.pgen), t.tid)).or_insert_with(|| Thread { pgen: t.pgen, ..Thread::new(t.pid, t.tid, &t.comm) });
                merge_thread(e, t);
            }
            Record::Stack(s) => g.stacks.entry((s.pid, pgen_of(s.pgen), s.tid)).or_default().push(s),
            Record::Stats(s) => {
                for (k, v) in &s.counts {
                    *g.stats.entry(k.clone()).or_insert(0) += v;
                }
                if g.stats_end_ns.is_none() {
                    g.stats_end_ns = s.end_ns;
                }
            }
            Record::Maps(m) => g.modules.add(m),
            // The reader resolves the stack table into each stack's frames.
            Record::Frame(_) | Record::StackDef(_) => {}
            Record::Slice(_) | Record::SliceStack(_) | Record::Probe(_) | Record::Span(_) | Record::Ksyms(_) => {}
        }
    }
    g
}

/// What the headers say together.
struct Headers {
    tools: Vec<String>,
    lost: BTreeMap<String, u64>,
    event: Option<String>,
    event_period: Option<u64>,
    kernel_lacks: Vec<String>,
    /// What the captures' runtime readers read, where a header says it
    /// (stream 1.7), by reader.
    runtime_versions: Option<BTreeMap<String, Vec<String>>>,
}

/// The headers' tools, losses and event, their window widened into `window`.
fn headers_of(headers: &[&Header], window: &mut Window) -> Headers {
    let mut tools = Vec::new();
    let mut lost = BTreeMap::new();
    let event = headers.iter().find_map(|h| h.event.clone());
    let event_period = headers.iter().find_map(|h| h.event_period);
    let mut kernel_lacks: Vec<String> = Vec::new();
    for k in headers.iter().flat_map(|h| &h.kernel_lacks) {
        if !kernel_lacks.contains(k) {
            kernel_lacks.push(k.clone());
        }
    }
    let mut runtime_versions: Option<BTreeMap<String, Vec<String>>> = None;
    for h in headers {
        if !h.runtime_versions.is_empty() {
            let into = runtime_versions.get_or_insert_with(BTreeMap::new);
            for (r, vs) in &h.runtime_versions {
                let into = into.entry(r.clone()).or_default();
                into.extend(vs.iter().filter(|v| !into.contains(v)).cloned().collect::<Vec<_>>());
            }
        }
        tools.push(h.tool.clone());
        for (k, v) in &h.lost {
            *lost.entry(k.clone()).or_insert(0) += v;
        }
        window.start_ns = min_opt(window.start_ns, h.start_ns);
        window.end_ns = max_opt(window.end_ns, h.end_ns);
    }
    Headers { tools, lost, event, event_period, kernel_lacks, runtime_versions }
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn max_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn thread_report(t: &Thread, ss: &[&Stack], w: &Window, top_n: usize, modules: &Modules) -> ThreadReport {
    // A capture stream read directly (not through stackmerge): the sampled
    // on-CPU stacks divide the thread's exact on-CPU time, as stackmerge
    // would scale them (the same rule, so its output is unchanged here).
    let scaled: Vec<Stack>;
    let ss: Vec<&Stack> = match sampled_on_ns(t) {
        Some(on) if ss.iter().any(|s| s.kind == Kind::On && s.count > 0) => {
            let total: u64 = ss.iter().filter(|s| s.kind == Kind::On).map(|s| s.count).sum();
            let denom = t.samples.filter(|n| *n > 0).unwrap_or(total);
            scaled = ss
                .iter()
                .map(|s| {
                    let mut s = (*s).clone();
                    if s.kind == Kind::On && s.count > 0 {
                        s.ns = scale_samples(on, s.count, denom);
                    }
                    s
                })
                .collect();
            scaled.iter().collect()
        }
        _ => ss.to_vec(),
    };
    let ss = ss.as_slice();
    let sum = |k: Kind| ss.iter().filter(|s| s.kind == k).map(|s| s.ns).sum::<u64>();
    let on_ns = t.on_ns.unwrap_or_else(|| sum(Kind::On));
    let off_ns = t.off_ns.unwrap_or_else(|| {
        let mut o = StateNs::default();
        for s in ss.iter().filter(|s| s.kind == Kind::Off) {
            *o.get_mut(s.state.unwrap_or(State::Other)) += s.ns;
        }
        o
    });
    let start_ns = t.start_ns.or(w.start_ns);
    let end_ns = t.end_ns.or(w.end_ns);
    let alive_ns = match (start_ns, end_ns) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    let has = |s: &Stack, name: &str| s.frames.iter().any(|f| f.func == name);
    let short_blocks_ns = ss.iter().filter(|s| has(s, SHORT_BLOCKS)).map(|s| s.ns).sum();
    let lost_stack_ns = ss.iter().filter(|s| has(s, LOST_STACK)).map(|s| s.ns).sum();
    let off_stacks: Vec<&Stack> = ss.iter().filter(|s| s.kind == Kind::Off).copied().collect();
    // Stacks without a state (plain folded input) are accounted under
    // `other`, but what they wait in still says what the thread does.
    let mut for_class = off_ns;
    if t.off_ns.is_none() {
        let unknown: u64 = off_stacks.iter().filter(|s| s.state.is_none()).map(|s| s.ns).sum();
        for_class.other -= unknown;
        for_class.s += unknown;
    }
    let class = behaviour(on_ns, &for_class, alive_ns.unwrap_or(0), &off_stacks).name().to_string();
    let off_total_ns = off_ns.total();
    let base = alive_ns.or(Some(on_ns + off_total_ns));
    let top = TopStacks {
        on: top_of(ss, Kind::On, top_n, base),
        off: top_of(ss, Kind::Off, top_n, base),
        gpu: top_of(ss, Kind::Gpu, top_n, base),
        other: top_of(ss, Kind::Other, top_n, base),
    };
    let functions = by_function(ss, &t.comm, base, modules);
    ThreadReport {
        pid: t.pid,
        pgen: t.pgen,
        tid: t.tid,
        comm: t.comm.clone(),
        role: role_for(t),
        class,
        start_ns,
        end_ns,
        alive_ns,
        on_ns,
        steal_ns: t.steal_ns.unwrap_or(0),
        off_ns,
        off_total_ns,
        gpu_ns: ss.iter().filter(|s| gpu::is_device_work(s)).map(|s| s.ns).sum(),
        gpu_sync_ns: ss.iter().filter(|s| s.kind == Kind::Gpu && !gpu::is_device_work(s)).map(|s| s.ns).sum(),
        gil_ns: ss.iter().filter(|s| s.kind == Kind::Off && has(s, GIL_FRAME)).map(|s| s.ns).sum(),
        other_ns: sum(Kind::Other),
        coverage_pct: pct(on_ns + off_total_ns, alive_ns),
        short_blocks_ns,
        lost_stack_ns,
        top,
        functions,
        functions_rest_ns: 0,
        functions_rest: 0,
    }
}

/// The `n` heaviest stacks of a kind, identical texts summed.
fn top_of(ss: &[&Stack], kind: Kind, n: usize, base: Option<u64>) -> Vec<TopStack> {
    // (text, state) -> ns, count, the records that carry a waker.
    type Acc<'a> = (u64, u64, Vec<&'a Stack>);
    let mut by: BTreeMap<(String, Option<State>), Acc> = BTreeMap::new();
    for s in ss.iter().filter(|s| s.kind == kind) {
        let e = by.entry((stack_text(s), s.state)).or_insert((0, 0, Vec::new()));
        e.0 += s.ns;
        e.1 += s.count;
        if s.waker.is_some() {
            e.2.push(s);
        }
    }
    let mut v: Vec<TopStack> = by
        .into_iter()
        .map(|((stack, state), (ns, count, woken))| TopStack {
            stack,
            state,
            ns,
            count,
            pct: pct(ns, base),
            wakers: crate::wakers::top(&woken, 3),
        })
        .collect();
    // Heaviest first; ties by text so the order is stable.
    v.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.stack.cmp(&b.stack)));
    v.truncate(n);
    v
}
