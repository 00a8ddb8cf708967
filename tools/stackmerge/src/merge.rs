//! Reading the inputs and aggregating their stacks as they come (the end
//! of the merge is [`crate::finish`]).

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::PathBuf;

use anyhow::{bail, Result};
use wallclock_stream::accounting::merge_thread;
use wallclock_stream::cli::open_input;
use wallclock_stream::fasthash::FastMap;
use wallclock_stream::sniff::{sniff, InputKind};
use wallclock_stream::{
    Defs, Header, Kind, Maps, Reader, ReaderOptions, Record, Stack, Stats, Thread,
};

use crate::intern::{InputIds, Interned, Memo};
use crate::key::{Agg, Comms, Key};
use crate::named::{Named, NamedAgg};
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
    pub(crate) opts: Options,
    pub(crate) header: Header,
    pub(crate) clock: Option<(String, String)>,
    /// The first header's sampled event (None: time) and its input.
    pub(crate) unit: Option<(Option<String>, String)>,
    pub(crate) threads: BTreeMap<ThreadKey, Thread>,
    pub(crate) maps: Vec<Maps>,
    pub(crate) stats: Stats,
    pub(crate) any_stats: bool,
    pub(crate) folded_on_input: bool,
    /// Samples per thread over all inputs: the denominators.
    pub(crate) thread_samples: FastMap<ThreadKey, u64>,
    pub(crate) agg: FastMap<Key, Agg>,
    /// The bulk of a symbolized stream, aggregated on a small key.
    pub(crate) named: NamedAgg,
    pub(crate) comms: Comms,
    /// Every distinct stack of frames, interned: keys hold its id.
    pub(crate) interned: Interned,
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
            named: NamedAgg::default(),
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
    pub fn read<R: BufRead>(&mut self, role: InputRole, r: R, name: &str) -> Result<()> {
        let mut ids = InputIds::default();
        let res = self.read_records(role, r, name, &mut ids);
        // What its stacks' last records summed goes in, also after a bad line.
        ids.flush(&mut self.named);
        res
    }

    fn read_records<R: BufRead>(&mut self, role: InputRole, mut r: R, name: &str, ids: &mut InputIds) -> Result<()> {
        let perf_script = r.fill_buf().is_ok_and(|b| sniff(b) == InputKind::PerfScript);
        let mut header_seen = false;
        let mut freq = self.opts.freq;
        let mut counted = false;
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
                Record::Thread(t) => match self.threads.get_mut(&thread_key(&t)) {
                    Some(into) => merge_thread(into, &t),
                    None => {
                        self.threads.insert(thread_key(&t), t);
                    }
                },
                Record::Maps(m) => {
                    if !self.maps.contains(&m) {
                        self.maps.push(m);
                    }
                }
                // The merged view is the summed one: a timeline is read
                // from the capture's own stream (wcexport --trace).
                Record::Slice(_) | Record::SliceStack(_) | Record::Probe(_) | Record::Span(_) | Record::Ksyms(_) => {}
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
                    self.add(s, role, perf_script, scale, reader.defs(), ids);
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
        if !self.opts.objects {
            s.object = None;
        }
        let input_id = s.stack_id.take();
        let input = match input_id {
            Some(id) => Some(ids.stack(id, defs, &mut self.interned.table, &mut self.named)),
            None => None,
        };
        let Some(input) = input else {
            let (key, v) = self.key_of(s, None, None, scale);
            self.agg.entry(key).or_default().add(v);
            return;
        };
        let base = Some(input.id);
        if s.gpu.is_some() || s.waker.is_some() {
            let (key, v) = self.key_of(s, base, Some(&mut input.memo), scale);
            self.agg.entry(key).or_default().add(v);
            return;
        }
        let Some(frames) = self.interned.frames(&mut s, base, Some(&mut input.memo)) else {
            let (key, v) = Key::of(s, None, scale, &mut self.comms);
            self.agg.entry(key).or_default().add(v);
            return;
        };
        // The key of this input stack's last record, most often this
        // one's too (checked field by field, the thread name as text):
        // summed beside it, the merged entry left alone until the key
        // changes or the input ends.
        let first = match &input.last {
            Some((k, _))
                if k.frames == frames
                    && k.pid == s.pid
                    && k.pgen == wallclock_stream::pgen::pgen_of(s.pgen)
                    && k.tid == s.tid
                    && k.kind == s.kind
                    && k.state == s.state
                    && k.scale == scale
                    && self.comms.name(k.comm) == s.comm =>
            {
                input.ns += s.ns;
                input.count += s.count;
                return;
            }
            Some(_) => {
                input.settle(&mut self.named);
                false
            }
            None => true,
        };
        let key = Named { frames, kind: s.kind, state: s.state, pid: s.pid, pgen: wallclock_stream::pgen::pgen_of(s.pgen), tid: s.tid, comm: self.comms.id(s.comm), scale };
        let slot = self.named.add(key, Agg { ns: s.ns, count: s.count, launch_delay_ns: None });
        input.last = Some((key, slot));
        if first {
            ids.pending.extend(input_id);
        }
    }

    /// A stack's aggregation key and value: its frames (those of table
    /// stack `base` when given) interned, with the kind's leaf frame
    /// appended once (a re-merge does not add a second). Unsymbolized
    /// stacks keep their addresses for a later `stacksym`; their leaf is
    /// added when they are written folded.
    pub(crate) fn key_of(&mut self, mut s: Stack, base: Option<u32>, memo: Option<&mut Memo>, scale: Option<u64>) -> (Key, Agg) {
        let frames = self.interned.frames(&mut s, base, memo);
        Key::of(s, frames, scale, &mut self.comms)
    }
}

/// A thread: (pid, the process's generation under it, tid). Two
/// processes with one pid (used again within the capture) are two.
pub(crate) type ThreadKey = (u32, u32, u32);

pub(crate) fn thread_key(t: &Thread) -> ThreadKey {
    (t.pid, wallclock_stream::pgen::pgen_of(t.pgen), t.tid)
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
    for k in &h.kernel_lacks {
        if !into.kernel_lacks.contains(k) {
            into.kernel_lacks.push(k.clone());
        }
    }
    // What each capture's readers read (the captures of one run read the same).
    for (r, vs) in &h.runtime_versions {
        let into = into.runtime_versions.entry(r.clone()).or_default();
        for v in vs {
            if !into.contains(v) {
                into.push(v.clone());
            }
        }
    }
}

fn kind_in(s: &Stack, role: InputRole) -> Kind {
    match (s.kind, role) {
        (Kind::Other, InputRole::Off) => Kind::Off,
        (Kind::Other, InputRole::On) => Kind::On,
        (Kind::Other, InputRole::Gpu) => Kind::Gpu,
        (k, _) => k,
    }
}

pub(crate) fn keep(s: &Stack, opts: &Options) -> bool {
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
            objects: true,
        }
    }

    /// An off-CPU stack's object is a frame after its state leaf, its
    /// stacks on two objects two lines; merged again, no second leaf or
    /// object; --no-objects sums over them.
    #[test]
    fn objects_are_frames_after_the_state() {
        let recs = [
            r#"{"type":"stack","kind":"off","state":"S","pid":7,"tid":7,"comm":"app","frames":[{"func":"main"},{"func":"read"}],"ns":3000,"count":1,"object":"tcp 127.0.0.1:5432"}"#,
            r#"{"type":"stack","kind":"off","state":"S","pid":7,"tid":7,"comm":"app","frames":[{"func":"main"},{"func":"read"}],"ns":2000,"count":1,"object":"pipe"}"#,
            r#"{"type":"stack","kind":"off","state":"S","pid":7,"tid":7,"comm":"app","frames":[{"func":"main"},{"func":"read"}],"ns":1000,"count":1}"#,
        ]
        .join("\n");
        let folded = |o: &Options, input: &str| {
            let mut m = Merger::new(o);
            m.read(InputRole::Off, input.as_bytes(), "off").unwrap();
            let mut out = Vec::new();
            crate::write(&mut m.finish(), o, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        let got = folded(&opts(), &recs);
        assert_eq!(
            got,
            "app (7);main;read;[sleep];[pipe]_[o] 2000\napp (7);main;read;[sleep];[tcp 127.0.0.1:5432]_[o] 3000\napp (7);main;read;[sleep]_[o] 1000\n"
        );
        // The folded lines merged again (read as µs): the same stacks.
        let stacks = |t: &str| t.lines().map(|l| l.rsplit_once(' ').unwrap().0.to_string()).collect::<Vec<_>>();
        assert_eq!(stacks(&folded(&opts(), &got.replace("app (7);", ""))), stacks(&got.replace("app (7);", "")));
        let none = Options { objects: false, ..opts() };
        assert_eq!(folded(&none, &recs), "app (7);main;read;[sleep]_[o] 6000\n");
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
        assert_eq!(m.finish().len(), 1);
    }
}
