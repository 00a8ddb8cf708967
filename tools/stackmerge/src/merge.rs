//! Reading the inputs, putting every stack in ns, aggregating, writing.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::path::PathBuf;

use anyhow::{bail, Result};
use wallclock_stream::accounting::{
    merge_thread, role_for, sampled_on_ns, samples_to_ns, scale_samples, steal_stack, STEAL_FRAME,
};
use wallclock_stream::cli::open_input;
use wallclock_stream::fasthash::FastMap;
use wallclock_stream::sniff::{sniff, InputKind};
use wallclock_stream::{
    Defs, Header, Kind, Maps, Reader, ReaderOptions, Record, Stack, StackTable, Stats, Thread,
};

use crate::intern::{ranks, InputIds, Interned, Memo};
use crate::key::{order, Agg, Comms, Key};
use crate::Options;

/// What an input was given as: it decides the kind of unmarked folded
/// lines and how on-CPU values are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputRole {
    Off,
    On,
    Gpu,
}

/// Reads inputs one after the other, aggregating as it goes (identical
/// stacks are summed on the fly, so memory follows distinct stacks, not
/// lines), and puts everything in ns when done, once every thread's exact
/// on-CPU time is known.
pub struct Merger {
    opts: Options,
    header: Header,
    clock: Option<(String, String)>,
    /// The first header's sampled event (None: time) and its input.
    unit: Option<(Option<String>, String)>,
    threads: BTreeMap<(u32, u32), Thread>,
    maps: Vec<Maps>,
    stats: Stats,
    any_stats: bool,
    folded_on_input: bool,
    /// Samples per thread over all inputs: the denominators.
    thread_samples: FastMap<(u32, u32), u64>,
    agg: FastMap<Key, Agg>,
    /// The bulk of a symbolized stream, aggregated first on a small key
    /// (see [`Named`]), into `agg` when the reading is done.
    named: FastMap<Named, Agg>,
    comms: Comms,
    /// Every distinct stack of frames, interned: keys hold its id.
    interned: Interned,
}

impl Merger {
    pub fn new(opts: &Options) -> Self {
        Merger {
            opts: opts.clone(),
            header: Header::new("stackmerge", env!("CARGO_PKG_VERSION")),
            clock: None,
            unit: None,
            threads: BTreeMap::new(),
            maps: Vec::new(),
            stats: Stats::default(),
            any_stats: false,
            folded_on_input: false,
            thread_samples: FastMap::default(),
            agg: FastMap::default(),
            named: FastMap::default(),
            comms: Comms::default(),
            interned: Interned::default(),
        }
    }

    /// Read the inputs in order; stop at the first bad line (what was read
    /// before it stays merged).
    pub fn read_paths(&mut self, paths: &[(InputRole, PathBuf)]) -> Result<()> {
        for (role, p) in paths {
            let (name, r) = open_input(p)?;
            self.read(*role, r, &name)?;
        }
        Ok(())
    }

    /// Read one input (`name` is for error messages).
    pub fn read<R: BufRead>(&mut self, role: InputRole, mut r: R, name: &str) -> Result<()> {
        let perf_script = r.fill_buf().is_ok_and(|b| sniff(b) == InputKind::PerfScript);
        let mut header_seen = false;
        let mut freq = self.opts.freq;
        let mut counted = false;
        let mut ids = InputIds::default();
        let mut reader = Reader::new(r, name, ReaderOptions::default()).keep_stack_ids().skip_named_addresses();
        while let Some(rec) = reader.next() {
            match rec? {
                Record::Header(h) if !header_seen => {
                    header_seen = true;
                    // One clock or nothing: ns of two clocks do not add up.
                    match &self.clock {
                        Some((c, first)) if *c != h.clock => {
                            bail!("{name}: clock {:?} differs from {first}'s {c:?}; convert it before merging", h.clock)
                        }
                        Some(_) => {}
                        None => self.clock = Some((h.clock.clone(), name.to_string())),
                    }
                    // One unit or nothing: page faults and ns do not add up.
                    match &self.unit {
                        Some((e, first)) if *e != h.event => {
                            let says = |e: &Option<String>| e.as_ref().map_or("time".to_string(), |e| format!("{e} (oncputime -e)"));
                            bail!("{name} counts {}, {first} {}: they do not add up", says(&h.event), says(e))
                        }
                        Some(_) => {}
                        None => self.unit = Some((h.event.clone(), name.to_string())),
                    }
                    // An event profile's values are event counts already.
                    counted = h.event.is_some();
                    freq = h.freq_hz.filter(|f| *f > 0).unwrap_or(self.opts.freq);
                    merge_header(&mut self.header, &h, role);
                }
                Record::Header(_) | Record::Frame(_) | Record::StackDef(_) => {}
                Record::Thread(t) => match self.threads.get_mut(&(t.pid, t.tid)) {
                    Some(into) => merge_thread(into, &t),
                    None => {
                        self.threads.insert((t.pid, t.tid), t);
                    }
                },
                Record::Maps(m) => {
                    if !self.maps.contains(&m) {
                        self.maps.push(m);
                    }
                }
                // The merged view is the summed one: a timeline is read
                // from the capture's own stream (wcexport --trace).
                Record::Slice(_) | Record::SliceStack(_) | Record::Probe(_) | Record::Span(_) => {}
                Record::Stats(s) => {
                    self.any_stats = true;
                    self.stats.end_ns = self.stats.end_ns.max(s.end_ns);
                    for (k, v) in s.counts {
                        *self.stats.counts.entry(k).or_insert(0) += v;
                    }
                }
                Record::Stack(s) => {
                    // On-CPU values to scale: `--on` inputs and streams (a
                    // header); not folded `_[c]` lines given as off-CPU
                    // input, whose values are already time (us).
                    let scale = if perf_script {
                        None
                    } else {
                        let k = kind_in(&s, role);
                        (k == Kind::On && (role == InputRole::On || header_seen) && s.count > 0 && !counted).then_some(freq)
                    };
                    if role == InputRole::On && !header_seen {
                        self.folded_on_input = true;
                    }
                    self.add(s, role, perf_script, scale, reader.defs(), &mut ids);
                }
            }
        }
        Ok(())
    }

    fn add(&mut self, mut s: Stack, role: InputRole, perf_script: bool, scale: Option<u64>, defs: &Defs, ids: &mut InputIds) {
        s.kind = kind_in(&s, role);
        if perf_script {
            // Summed periods: already ns (cpu-clock), not a sample count;
            // count 0 so that a later merge does not take it for samples.
            s.ns = s.count;
            s.count = 0;
        }
        if !keep(&s, &self.opts) {
            return;
        }
        if !self.opts.wakers {
            s.waker = None;
        }
        let (base, memo) = match s.stack_id.take() {
            Some(id) => {
                let (base, memo) = ids.stack(id, defs, &mut self.interned.table);
                (Some(base), Some(memo))
            }
            None => (None, None),
        };
        if scale.is_some() {
            *self.thread_samples.entry((s.pid, s.tid)).or_insert(0) += s.count;
        }
        if base.is_some() && s.gpu.is_none() && s.waker.is_none() {
            let frames = self.interned.frames(&mut s, base, memo);
            if let Some(frames) = frames {
                let key = Named { frames, kind: s.kind, state: s.state, pid: s.pid, tid: s.tid, comm: self.comms.id(s.comm), scale };
                self.named.entry(key).or_default().add(Agg { ns: s.ns, count: s.count, launch_delay_ns: None });
                return;
            }
            let (key, v) = Key::of(s, frames, scale, &mut self.comms);
            self.agg.entry(key).or_default().add(v);
            return;
        }
        let (key, v) = self.key_of(s, base, memo, scale);
        self.agg.entry(key).or_default().add(v);
    }

    /// A stack's aggregation key and value: its frames (those of table
    /// stack `base` when given) interned, with the kind's leaf frame
    /// appended once (a re-merge does not add a second). Unsymbolized
    /// stacks keep their addresses for a later `stacksym`; their leaf is
    /// added when they are written folded.
    fn key_of(&mut self, mut s: Stack, base: Option<u32>, memo: Option<&mut Memo>, scale: Option<u64>) -> (Key, Agg) {
        let frames = self.interned.frames(&mut s, base, memo);
        Key::of(s, frames, scale, &mut self.comms)
    }

    /// Samples become ns (each thread's exact on-CPU time divided by its
    /// samples, else samples / freq), filters and roles applied.
    pub fn finish(mut self) -> Merged {
        for (n, v) in std::mem::take(&mut self.named) {
            self.agg.entry(n.key()).or_default().add(v);
        }
        // A thread's steal is one stack made from its merged record (two
        // inputs may each carry one for the same thread).
        let steals: Vec<Stack> = self.threads.values().filter_map(steal_stack).filter(|s| keep(s, &self.opts)).collect();
        let t = &self.interned.table;
        let threads = &self.threads;
        self.agg.retain(|k, _| {
            !(k.kind == Kind::On
                && k.frames.is_some_and(|id| t.stack(id).len() == 1 && t.frame(t.stack(id)[0]).func == STEAL_FRAME)
                && threads.get(&(k.pid, k.tid)).is_some_and(|t| t.steal_ns.is_some()))
        });
        for s in steals {
            let (key, v) = self.key_of(s, None, None, None);
            self.agg.entry(key).or_default().add(v);
        }
        let opts = &self.opts;
        crate::unsampled::add(
            &mut self.agg,
            &mut self.interned,
            &mut self.comms,
            &self.threads,
            &self.thread_samples,
            |s| keep(s, opts),
        );
        let Merger {
            opts,
            mut header,
            threads,
            mut maps,
            mut stats,
            any_stats,
            folded_on_input,
            thread_samples,
            agg,
            interned,
            comms,
            ..
        } = self;
        let table = interned.table;
        if header.freq_hz.is_none() && folded_on_input {
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
        let mut done: Vec<(Key, Agg)> = Vec::with_capacity(agg.len());
        for (mut key, mut v) in agg {
            if let Some(freq) = key.scale.take() {
                let t = threads.get(&(key.pid, key.tid));
                let denom = t
                    .and_then(|t| t.samples)
                    .filter(|n| *n > 0)
                    .or_else(|| thread_samples.get(&(key.pid, key.tid)).copied());
                v.ns = match (t.and_then(sampled_on_ns), denom) {
                    (Some(on), Some(n)) if n > 0 => scale_samples(on, v.count, n),
                    _ => samples_to_ns(v.count, freq),
                };
            }
            done.push((key, v));
        }
        // Sorted once at the end; a stack that came both as samples and as
        // time (or at two frequencies) now has one key: merge neighbours.
        // In the order of the frames themselves (not of their ids).
        let rank = ranks(&table, done.iter().filter_map(|(k, _)| k.frames));
        let comm_rank = comms.ranks();
        done.sort_unstable_by(|a, b| order(&a.0, &rank, &comm_rank).cmp(&order(&b.0, &rank, &comm_rank)));
        done.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1.add(later.1);
            }
            same
        });
        let stacks = done.into_iter().map(|(k, v)| k.into_stack(v, &comms)).collect();
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
        let mut merged = Merged { header, threads, maps, stacks, stats, table };
        crate::symbolize::name_frames(&mut merged);
        merged
    }
}

/// The key of a stack with frames and nothing else to tell it by (no
/// addresses kept, no GPU detail, no waker): what [`Key::of`] makes of
/// it, in 32 bytes instead of 120. Hashing and comparing the full key for
/// each of 1M records was a quarter of stackmerge's time; each distinct
/// one is made into a [`Key`] once, at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Named {
    frames: u32,
    kind: Kind,
    state: Option<wallclock_stream::State>,
    pid: u32,
    tid: u32,
    comm: u32,
    scale: Option<u64>,
}

impl Named {
    fn key(self) -> Key {
        Key {
            kind: self.kind,
            state: self.state,
            pid: self.pid,
            tid: self.tid,
            comm: self.comm,
            ulen: 0,
            addrs: Vec::new(),
            frames: Some(self.frames),
            gpu: None,
            scale: self.scale,
            waker: None,
        }
    }
}

/// The merged view.
#[derive(Debug, Clone)]
pub struct Merged {
    pub header: Header,
    pub threads: BTreeMap<(u32, u32), Thread>,
    pub maps: Vec<Maps>,
    /// Aggregated, in ns, off-CPU leaf appended where frames exist; the
    /// frames are `stack_id`'s in `table`.
    pub stacks: Vec<Stack>,
    pub stats: Stats,
    pub table: StackTable,
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
    // The window's schedule and realtime: of the first capture that has
    // them (the captures of one run share them).
    into.prepare = into.prepare.take().or_else(|| h.prepare.clone());
    into.activate = into.activate.take().or_else(|| h.activate.clone());
    into.start_realtime_ns = match (into.start_realtime_ns, h.start_realtime_ns) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    into.event = into.event.take().or_else(|| h.event.clone());
    into.event_period = into.event_period.or(h.event_period);
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn opts() -> Options {
        Options {
            folded: true,
            unit: wallclock_stream::units::Unit::Ns,
            freq: 49,
            per_thread: false,
            roots: Default::default(),
            gpu_roots: false,
            pids: vec![],
            tids: vec![],
            kinds: vec![],
            wakers: false,
        }
    }

    #[test]
    fn in_process_merge_of_folded_inputs() {
        let mut m = Merger::new(&opts());
        m.read(InputRole::Off, &b"app;main;read 3\napp;main;read 2\n"[..], "off").unwrap();
        m.read(InputRole::On, &b"app;main;spin 49\n"[..], "on").unwrap();
        let mut out = Vec::new();
        crate::write(&mut m.finish(), &opts(), &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "app;main;read_[o] 5000\napp;main;spin_[c] 1000000000\n");
    }

    #[test]
    fn bad_line_keeps_what_came_before() {
        let mut m = Merger::new(&opts());
        let err = m.read(InputRole::Off, &b"a;b 1\nbroken\n"[..], "x").unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
        assert_eq!(m.finish().stacks.len(), 1);
    }
}
