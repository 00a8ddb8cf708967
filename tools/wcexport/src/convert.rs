//! From the stream's records to a pprof profile. The mapping, as
//! wcexport(1) documents it:
//!
//! - one sample per (stack, labels); values in ns, one per sample type:
//!   `wall` (on + off: the stack's `ns`), `cpu` (on-CPU), `off_cpu_*` by
//!   state, `gpu` (never part of `wall`, as in every wallclock tool);
//! - labels `thread` (comm), `thread_id`, `process` (the name of the
//!   thread whose tid is the pid), `pid`, `state`, and `object` for an
//!   off-CPU stack that waited on one (`file /path`, `tcp ADDR:PORT`,
//!   `lock in worker_loop`...), with `object_raw` (`lock 0x7f..`) for a
//!   lock stackmerge named by its call site;
//! - a symbolized frame and the frames inlined into it are one Location
//!   with several Lines (innermost first); its address is the stream's raw
//!   address when the frames line up with `ustack`/`kstack`;
//! - a raw address is a Location with that address and its Mapping;
//! - Mappings come from Maps records (file, build id, start, limit,
//!   offset); kernel frames share a `[kernel.kallsyms]` mapping; synthetic
//!   `[bracketed]` frames have none.

use std::collections::HashMap;

use wallclock_stream::pgen::{pgen_of, pgen_suffix};
use wallclock_stream::{Frame, Header, Kind, MapEntry, NamedAddr, Record, Slice, SliceStack, Stack, State, Stats, Thread};

use crate::profile::{MappingKey, Profile};

/// (type, unit) of each value, in this order; `wall` is the default.
pub const SAMPLE_TYPES: [(&str, &str); 7] = [
    ("wall", "nanoseconds"),
    ("cpu", "nanoseconds"),
    ("off_cpu_runnable", "nanoseconds"),
    ("off_cpu_sleeping", "nanoseconds"),
    ("off_cpu_uninterruptible", "nanoseconds"),
    ("off_cpu_other", "nanoseconds"),
    ("gpu", "nanoseconds"),
];

/// [`SAMPLE_TYPES`], or for an event profile (`oncputime -e`) the same
/// values as counts of its event, the first named for it.
fn sample_types(inp: &Input) -> Vec<(&str, &str)> {
    match inp.header.as_ref().and_then(|h| h.event.as_deref()) {
        Some(e) => SAMPLE_TYPES.iter().enumerate().map(|(i, (t, _))| (if i == 0 { e } else { *t }, "count")).collect(),
        None => SAMPLE_TYPES.to_vec(),
    }
}

const KERNEL_MAPPING: &str = "[kernel.kallsyms]";

/// Everything read, sorted by record type.
#[derive(Debug, Default)]
pub struct Input {
    pub header: Option<Header>,
    pub threads: Vec<Thread>,
    pub maps: HashMap<u32, Vec<MapEntry>>,
    /// Frames the capture named itself (`Maps::names`: Python's), per pid.
    pub names: HashMap<u32, Vec<NamedAddr>>,
    pub stacks: Vec<Stack>,
    pub stats: Option<Stats>,
    /// The timeline (`--timeline` captures).
    pub slices: Vec<Slice>,
    pub slice_stacks: Vec<SliceStack>,
    /// The program's own events and spans (`--probe`, 1.4).
    pub probes: Vec<wallclock_stream::ProbeEvent>,
    pub spans: Vec<wallclock_stream::Span>,
}

impl Input {
    pub fn new(records: Vec<Record>) -> Self {
        let mut inp = Input::default();
        for r in records {
            match r {
                Record::Header(h) => {
                    inp.header.get_or_insert(h);
                }
                Record::Thread(t) => inp.threads.push(t),
                Record::Maps(m) => {
                    inp.maps.entry(m.pid).or_default().extend(m.maps);
                    inp.names.entry(m.pid).or_default().extend(m.names);
                }
                Record::Stack(s) => inp.stacks.push(s),
                Record::Slice(s) => inp.slices.push(s),
                Record::SliceStack(s) => inp.slice_stacks.push(s),
                Record::Probe(p) => inp.probes.push(p),
                Record::Span(s) => inp.spans.push(s),
                Record::Stats(s) => inp.stats = Some(s),
                // The reader resolves the stack table into each stack's
                // frames; kernel symbols are stacksym's to use.
                Record::Frame(_) | Record::StackDef(_) | Record::Ksyms(_) => {}
            }
        }
        inp
    }

    /// Process names by pid: the comm of the thread whose tid is the pid
    /// (its name after exec), else of such a stack, else the launched
    /// command's file name.
    pub fn process_names(&self) -> HashMap<u32, String> {
        let mut names = HashMap::new();
        for t in self.threads.iter().filter(|t| t.tid == t.pid && !t.comm.is_empty()) {
            names.insert(t.pid, t.comm.clone());
        }
        for s in self.stacks.iter().filter(|s| s.tid == s.pid && s.pid != 0 && !s.comm.is_empty()) {
            names.entry(s.pid).or_insert_with(|| s.comm.clone());
        }
        if let Some(h) = &self.header {
            if let (Some(&pid), Some(cmd)) = (h.pids.first(), h.command.as_ref().and_then(|c| c.first())) {
                names.entry(pid).or_insert_with(|| basename(cmd).to_string());
            }
        }
        names
    }

    /// The target's name: of the header's first pid, else of any process.
    pub fn main_process(&self) -> Option<(u32, String)> {
        let names = self.process_names();
        let pid = self.header.as_ref().and_then(|h| h.pids.first().copied());
        if let Some(n) = pid.and_then(|p| names.get(&p)) {
            return Some((pid.unwrap(), n.clone()));
        }
        names.into_iter().min_by_key(|(p, _)| *p)
    }

    /// Capture window (start, end) in ns on the stream's clock.
    pub fn window(&self) -> Option<(u64, u64)> {
        let h = self.header.as_ref()?;
        let end = h.end_ns.or(self.stats.as_ref().and_then(|s| s.end_ns))?;
        Some((h.start_ns?, end))
    }
}

pub fn basename(path: &str) -> &str {
    let p = path.trim_end_matches(" (deleted)");
    p.rsplit('/').next().filter(|s| !s.is_empty()).unwrap_or(p)
}

/// `[steal]`, `[io]`, `[lost stack]`...: frames that stand for no code
/// (`[unknown]+0x12` stands for an address and is not one).
fn is_synthetic(f: &Frame) -> bool {
    f.module.is_none() && f.func.starts_with('[') && f.func.ends_with(']')
}

pub fn state_label(s: &Stack) -> Option<&'static str> {
    match s.kind {
        Kind::On => Some("running"),
        Kind::Off => Some(s.state.unwrap_or(State::Other).label()),
        Kind::Gpu => Some("gpu"),
        Kind::Other => None,
    }
}

/// The stack's values, in [`SAMPLE_TYPES`] order. Off-CPU time of an
/// unknown state (folded input) counts as `other`.
pub fn values(s: &Stack) -> [i64; 7] {
    let ns = i64::try_from(s.ns).unwrap_or(i64::MAX);
    let mut v = [0; 7];
    match s.kind {
        Kind::On => (v[0], v[1]) = (ns, ns),
        Kind::Off => {
            let i = match s.state.unwrap_or(State::Other) {
                State::R => 2,
                State::S => 3,
                State::D => 4,
                State::Other => 5,
            };
            (v[0], v[i]) = (ns, ns);
        }
        Kind::Gpu => v[6] = ns,
        Kind::Other => v[0] = ns,
    }
    v
}

/// Builds the profile from an [`Input`].
pub struct Converter<'a> {
    inp: &'a Input,
    names: HashMap<u32, String>,
    /// Names of the later processes of a reused pid, by (pid, pgen).
    later: HashMap<(u32, u32), String>,
    comms: HashMap<(u32, u32, u32), &'a str>,
    pub profile: Profile,
}

impl<'a> Converter<'a> {
    pub fn new(inp: &'a Input) -> Self {
        let comms = inp.threads.iter().map(|t| ((t.pid, pgen_of(t.pgen), t.tid), t.comm.as_str())).collect();
        let later = inp
            .threads
            .iter()
            .filter(|t| t.tid == t.pid && pgen_of(t.pgen) > 0 && !t.comm.is_empty())
            .map(|t| ((t.pid, pgen_of(t.pgen)), t.comm.clone()))
            .collect();
        Converter { inp, names: inp.process_names(), later, comms, profile: Profile::new(&sample_types(inp), 0) }
    }

    /// Every stack as a sample; the main binary's mapping listed first.
    pub fn run(mut self) -> Profile {
        for s in &self.inp.stacks {
            let locs = self.locations(s);
            let labels = self.labels(s);
            self.profile.add_sample(locs, labels, &values(s));
        }
        if let Some((pid, name)) = self.inp.main_process() {
            let entries = self.inp.maps.get(&pid).map(Vec::as_slice).unwrap_or_default();
            // comm is cut at 15 bytes: a prefix of the file name.
            if let Some(e) = entries.iter().find(|e| !name.is_empty() && basename(&e.path).starts_with(name.as_str())) {
                self.profile.main_mapping = Some(self.profile.mapping(map_key(e)));
            }
        }
        self.profile
    }

    fn labels(&mut self, s: &Stack) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        let mut put = |p: &mut Profile, k: &str, v: &str| out.push((p.string(k), p.string(v)));
        if s.pid != 0 || s.tid != 0 {
            let pgen = pgen_of(s.pgen);
            let comm = if s.comm.is_empty() { self.comms.get(&(s.pid, pgen, s.tid)).copied().unwrap_or("") } else { &s.comm };
            // A later process of a reused pid is another process.
            let process = match pgen {
                0 => self.names.get(&s.pid).cloned().unwrap_or_else(|| format!("pid {}", s.pid)),
                g => {
                    let name = self.later.get(&(s.pid, g)).cloned().unwrap_or_else(|| format!("pid {}", s.pid));
                    name + &pgen_suffix(s.pgen)
                }
            };
            put(&mut self.profile, "thread", comm);
            put(&mut self.profile, "thread_id", &s.tid.to_string());
            put(&mut self.profile, "process", &process);
            put(&mut self.profile, "pid", &s.pid.to_string());
        }
        if let Some(st) = state_label(s) {
            put(&mut self.profile, "state", st);
        }
        // What an off-CPU stack waited on (stream 1.6): the frame stackmerge
        // put after its state leaf, else its field; where they differ (a
        // lock stackmerge named by its call site) the field, its address,
        // as `object_raw`.
        if s.kind == Kind::Off {
            let funcs: Vec<&str> = s.frames.iter().map(|f| f.func.as_str()).collect();
            let framed = wallclock_stream::accounting::object_of(&funcs);
            if let Some(o) = framed.or(s.object.as_deref()) {
                put(&mut self.profile, "object", o);
            }
            if let (Some(f), Some(raw)) = (framed, s.object.as_deref()) {
                if f != raw {
                    put(&mut self.profile, "object_raw", raw);
                }
            }
        }
        out
    }

    fn kernel_mapping(&mut self) -> u64 {
        let key = MappingKey { start: 0, limit: 0, offset: 0, file: KERNEL_MAPPING.into(), build_id: String::new() };
        self.profile.mapping(key)
    }

    /// The Maps entry holding `addr`, else the first of file `module`;
    /// a module without Maps records still gets a mapping by its name.
    fn user_mapping(&mut self, pid: u32, addr: u64, module: Option<&str>) -> u64 {
        let entries = self.inp.maps.get(&pid).map(Vec::as_slice).unwrap_or_default();
        let hit = entries
            .iter()
            .find(|e| addr != 0 && e.start <= addr && addr < e.end)
            .or_else(|| module.and_then(|m| entries.iter().find(|e| basename(&e.path) == m)));
        match (hit, module) {
            (Some(e), _) => self.profile.mapping(map_key(e)),
            (None, Some(m)) => {
                let key = MappingKey { start: 0, limit: 0, offset: 0, file: m.to_string(), build_id: String::new() };
                self.profile.mapping(key)
            }
            (None, None) => 0,
        }
    }

    /// Location ids of a stack, leaf first.
    fn locations(&mut self, s: &Stack) -> Vec<u64> {
        let mut ids = Vec::new();
        if s.frames.is_empty() {
            for &a in s.ustack.iter() {
                let m = self.user_mapping(s.pid, a, None);
                ids.push(self.profile.location(m, a, Vec::new(), false));
            }
            for &a in s.kstack.iter() {
                let m = self.kernel_mapping();
                ids.push(self.profile.location(m, a, Vec::new(), false));
            }
            ids.reverse();
            if ids.is_empty() {
                // Time with no frame and no address still needs a
                // location: pprof's views (top, tags, flame) leave out a
                // sample without one, and its time with it.
                let f = self.profile.function("[no frames]", "");
                ids.push(self.profile.location(0, 0, vec![(f, 0)], false));
            }
            return ids;
        }
        let groups = group(&s.frames);
        let real = |kernel: bool| groups.iter().filter(|g| !is_synthetic(g[0]) && g[0].kernel == kernel).count();
        // Frames and addresses line up only when none were added or cut.
        let mut uaddr = (real(false) == s.ustack.len()).then(|| s.ustack.iter());
        let mut kaddr = (real(true) == s.kstack.len()).then(|| s.kstack.iter());
        for g in &groups {
            let head = g[0];
            let (mapping, addr) = if is_synthetic(head) {
                (0, 0)
            } else if head.kernel {
                let a = kaddr.as_mut().and_then(Iterator::next).copied().unwrap_or(0);
                (self.kernel_mapping(), a)
            } else {
                let a = uaddr.as_mut().and_then(Iterator::next).copied().unwrap_or(0);
                (self.user_mapping(s.pid, a, head.module.as_deref()), a)
            };
            let lines = g
                .iter()
                .rev()
                .map(|f| (self.profile.function(&f.func, f.file.as_deref().unwrap_or("")), i64::from(f.line.unwrap_or(0))))
                .collect();
            let files = g.iter().any(|f| f.file.is_some());
            ids.push(self.profile.location(mapping, addr, lines, files));
        }
        ids.reverse();
        ids
    }
}

fn map_key(e: &MapEntry) -> MappingKey {
    MappingKey {
        start: e.start,
        limit: e.end,
        offset: e.offset,
        file: e.path.clone(),
        build_id: e.build_id.clone().unwrap_or_default(),
    }
}

/// Root-first frames grouped per address: a frame and the frames inlined
/// into it (stacksym writes the outer function first).
fn group(frames: &[Frame]) -> Vec<Vec<&Frame>> {
    let mut out: Vec<Vec<&Frame>> = Vec::new();
    for f in frames {
        match out.last_mut() {
            Some(g) if f.inlined && !is_synthetic(g[0]) => g.push(f),
            _ => out.push(vec![f]),
        }
    }
    out
}
