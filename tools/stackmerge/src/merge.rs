//! Reading the inputs, putting every stack in ns, aggregating, writing.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::BufRead;
use std::path::PathBuf;

use wallclock_stream::accounting::{kind_leaf, merge_thread, role_for, samples_to_ns, scale_samples};
use wallclock_stream::cli::open_input;
use wallclock_stream::{Frame, Header, Kind, Maps, Reader, ReaderOptions, Record, Stack, State, Stats, Thread};

use crate::Options;

/// What an input was given as: it decides the kind of unmarked folded
/// lines and how on-CPU values are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputRole {
    Off,
    On,
    Gpu,
}

/// One input, read.
#[derive(Debug, Clone)]
pub struct Input {
    pub role: InputRole,
    pub header: Option<Header>,
    pub records: Vec<Record>,
    /// Raw `perf script` text: each stack's value is the sum of its
    /// samples' periods, ns for the cpu-clock/task-clock events.
    pub perf_script: bool,
}

/// Read the inputs in order; stop at the first bad line and return it
/// beside what was read.
pub fn read_inputs(paths: &[(InputRole, PathBuf)]) -> (Vec<Input>, Option<anyhow::Error>) {
    let mut inputs = Vec::new();
    for (role, p) in paths {
        let (name, r) = match open_input(p) {
            Ok(x) => x,
            Err(e) => return (inputs, Some(e)),
        };
        let (input, err) = read_input(*role, r, &name);
        // One clock or nothing: ns of two clocks do not add up.
        let clock_of = |i: &Input| i.header.as_ref().map(|h| h.clock.clone());
        if let (Some(c), Some(first)) = (clock_of(&input), inputs.iter().find_map(clock_of)) {
            if c != first {
                let e = anyhow::anyhow!(
                    "{name}: clock {c:?} differs from the other inputs' {first:?}; convert it before merging"
                );
                return (inputs, Some(e));
            }
        }
        inputs.push(input);
        if err.is_some() {
            return (inputs, err);
        }
    }
    (inputs, None)
}

/// Read one input (`name` is for error messages); on a bad line, what came
/// before it and the error naming the line.
pub fn read_input<R: BufRead>(role: InputRole, mut r: R, name: &str) -> (Input, Option<anyhow::Error>) {
    let perf_script = starts_like_perf_script(&mut r);
    let mut input = Input { role, header: None, records: Vec::new(), perf_script };
    for rec in Reader::new(r, name, ReaderOptions::default()) {
        match rec {
            Ok(Record::Header(h)) if input.header.is_none() => input.header = Some(h),
            Ok(r) => input.records.push(r),
            Err(e) => return (input, Some(e.into())),
        }
    }
    (input, None)
}

/// Peek (without consuming) at the first line: `comm pid [cpu] time: period event:`.
fn starts_like_perf_script<R: BufRead>(r: &mut R) -> bool {
    let Ok(buf) = r.fill_buf() else { return false };
    let text = String::from_utf8_lossy(buf);
    let Some(first) = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#')) else { return false };
    if first.starts_with('{') || !first.ends_with(':') {
        return false;
    }
    first.split_whitespace().any(|w| {
        w.strip_suffix(':').is_some_and(|t| t.contains('.') && t.chars().all(|c| c.is_ascii_digit() || c == '.'))
    })
}

/// The merged view.
#[derive(Debug, Clone)]
pub struct Merged {
    pub header: Header,
    pub threads: BTreeMap<(u32, u32), Thread>,
    pub maps: Vec<Maps>,
    /// Aggregated, in ns, off-CPU leaf appended where frames exist.
    pub stacks: Vec<Stack>,
    pub stats: Stats,
}

/// Identity of a stack for aggregation.
type Key = (
    Kind,
    Option<State>,
    u32,
    u32,
    String,
    Vec<u64>,
    Vec<u64>,
    Vec<Frame>,
    Option<(String, Option<u32>, Option<u32>, Option<String>)>,
);

fn key_of(s: &Stack) -> Key {
    (
        s.kind,
        s.state,
        s.pid,
        s.tid,
        s.comm.clone(),
        s.ustack.clone(),
        s.kstack.clone(),
        s.frames.clone(),
        s.gpu.as_ref().map(|g| (g.activity.clone(), g.device, g.stream, g.name.clone())),
    )
}

fn merge_header(into: &mut Header, h: &Header, role: InputRole) {
    into.pids.extend(h.pids.iter().copied());
    if into.command.is_none() {
        into.command = h.command.clone();
    }
    into.start_ns = match (into.start_ns, h.start_ns) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    into.end_ns = match (into.end_ns, h.end_ns) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    if role == InputRole::On || into.freq_hz.is_none() {
        into.freq_hz = h.freq_hz.or(into.freq_hz);
    }
    if into.min_block_ns.is_none() {
        into.min_block_ns = h.min_block_ns;
    }
    for (k, v) in &h.lost {
        *into.lost.entry(k.clone()).or_insert(0) += v;
    }
}

/// Is an on-CPU stack of this input a sample count to scale? Yes for
/// `--on` inputs and for streams (a header); no for folded `_[c]` lines
/// given as off-CPU input, whose values are already time (us).
fn scales(input: &Input) -> bool {
    input.role == InputRole::On || input.header.is_some()
}

/// Merge the inputs: threads per (pid, tid), on-CPU samples scaled, the
/// state leaf appended, filters applied, identical stacks aggregated.
pub fn merge(inputs: &[Input], opts: &Options) -> Merged {
    let mut header = Header::new("stackmerge", env!("CARGO_PKG_VERSION"));
    let mut threads: BTreeMap<(u32, u32), Thread> = BTreeMap::new();
    let mut maps: Vec<Maps> = Vec::new();
    let mut stats = Stats::default();
    let mut any_stats = false;
    for input in inputs {
        if let Some(h) = &input.header {
            merge_header(&mut header, h, input.role);
        }
        for r in &input.records {
            match r {
                Record::Thread(t) => match threads.get_mut(&(t.pid, t.tid)) {
                    Some(into) => merge_thread(into, t),
                    None => {
                        threads.insert((t.pid, t.tid), t.clone());
                    }
                },
                Record::Maps(m) => {
                    if !maps.iter().any(|x| x == m) {
                        maps.push(m.clone());
                    }
                }
                Record::Stats(s) => {
                    any_stats = true;
                    stats.end_ns = stats.end_ns.max(s.end_ns);
                    for (k, v) in &s.counts {
                        *stats.counts.entry(k.clone()).or_insert(0) += v;
                    }
                }
                Record::Header(_) | Record::Stack(_) => {}
            }
        }
    }
    if header.freq_hz.is_none() && inputs.iter().any(|i| i.role == InputRole::On && i.header.is_none()) {
        header.freq_hz = Some(opts.freq);
    }
    header.pids = header
        .pids
        .iter()
        .copied()
        .filter(|p| opts.pids.is_empty() || opts.pids.contains(p))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if !any_stats {
        stats.end_ns = header.end_ns;
    }

    // Samples per thread over all inputs, for the denominators.
    let mut thread_samples: HashMap<(u32, u32), u64> = HashMap::new();
    for input in inputs.iter().filter(|i| scales(i) && !i.perf_script) {
        for r in &input.records {
            if let Record::Stack(s) = r {
                if kind_in(s, input.role) == Kind::On {
                    *thread_samples.entry((s.pid, s.tid)).or_insert(0) += s.count;
                }
            }
        }
    }

    let mut agg: BTreeMap<Key, Stack> = BTreeMap::new();
    for input in inputs {
        let freq = input.header.as_ref().and_then(|h| h.freq_hz).filter(|f| *f > 0).unwrap_or(opts.freq);
        for r in &input.records {
            let Record::Stack(s) = r else { continue };
            let mut s = s.clone();
            s.kind = kind_in(&s, input.role);
            if input.perf_script {
                // Summed periods: already ns (cpu-clock), not a sample count.
                s.ns = s.count;
            } else if s.kind == Kind::On && scales(input) && s.count > 0 {
                let t = threads.get(&(s.pid, s.tid));
                let denom = t
                    .and_then(|t| t.samples)
                    .filter(|n| *n > 0)
                    .or_else(|| thread_samples.get(&(s.pid, s.tid)).copied());
                s.ns = match (t.and_then(|t| t.on_ns), denom) {
                    (Some(on), Some(n)) if n > 0 => scale_samples(on, s.count, n),
                    _ => samples_to_ns(s.count, freq),
                };
            }
            if !keep(&s, opts) {
                continue;
            }
            append_state_leaf(&mut s);
            match agg.get_mut(&key_of(&s)) {
                Some(a) => {
                    a.ns += s.ns;
                    a.count += s.count;
                    if let (Some(ag), Some(sg)) = (a.gpu.as_mut(), s.gpu.as_ref()) {
                        ag.launch_delay_ns = match (ag.launch_delay_ns, sg.launch_delay_ns) {
                            (None, None) => None,
                            (x, y) => Some(x.unwrap_or(0) + y.unwrap_or(0)),
                        };
                    }
                }
                None => {
                    agg.insert(key_of(&s), s);
                }
            }
        }
    }

    let threads: BTreeMap<(u32, u32), Thread> = threads
        .into_iter()
        .filter(|((pid, tid), _)| {
            (opts.pids.is_empty() || opts.pids.contains(pid)) && (opts.tids.is_empty() || opts.tids.contains(tid))
        })
        .map(|(k, mut t)| {
            if t.role.is_none() {
                t.role = Some(role_for(&t));
            }
            (k, t)
        })
        .collect();
    maps.retain(|m| opts.pids.is_empty() || opts.pids.contains(&m.pid));
    Merged { header, threads, maps, stacks: agg.into_values().collect(), stats }
}

fn kind_in(s: &Stack, role: InputRole) -> Kind {
    match (s.kind, role) {
        (Kind::Other, InputRole::Off) => Kind::Off,
        (Kind::Other, InputRole::On) => Kind::On,
        (Kind::Other, InputRole::Gpu) => Kind::Gpu,
        (k, _) => k,
    }
}

fn keep(s: &Stack, opts: &Options) -> bool {
    (opts.pids.is_empty() || opts.pids.contains(&s.pid))
        && (opts.tids.is_empty() || opts.tids.contains(&s.tid))
        && (opts.kinds.is_empty() || opts.kinds.contains(&s.kind))
}

/// Append the kind's leaf frame, once (a re-merge does not add a second).
/// Unsymbolized stacks keep their addresses for a later `stacksym`; their
/// leaf is added when they are written folded.
fn append_state_leaf(s: &mut Stack) {
    let Some(leaf) = kind_leaf(s) else { return };
    if s.frames.is_empty() && !(s.ustack.is_empty() && s.kstack.is_empty()) {
        return;
    }
    if s.frames.last().is_some_and(|f| f.func == leaf) {
        return;
    }
    s.frames.push(Frame::named(leaf));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            folded: true,
            unit: wallclock_stream::units::Unit::Ns,
            freq: 49,
            per_thread: false,
            gpu_roots: false,
            pids: vec![],
            tids: vec![],
            kinds: vec![],
        }
    }

    #[test]
    fn in_process_merge_of_folded_inputs() {
        let (off, e1) = read_input(InputRole::Off, &b"app;main;read 3\napp;main;read 2\n"[..], "off");
        let (on, e2) = read_input(InputRole::On, &b"app;main;spin 49\n"[..], "on");
        assert!(e1.is_none() && e2.is_none());
        let m = merge(&[off, on], &opts());
        let mut out = Vec::new();
        crate::write(&m, &opts(), &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "app;main;read_[o] 5000\napp;main;spin_[c] 1000000000\n");
    }

    #[test]
    fn bad_line_keeps_what_came_before() {
        let (inp, err) = read_input(InputRole::Off, &b"a;b 1\nbroken\n"[..], "x");
        assert_eq!(inp.records.len(), 1);
        assert!(err.unwrap().to_string().contains("line 2"));
    }
}
