//! Whole Java stacks with no JVM flag: HotSpot's compiled, interpreted
//! and stub frames walked by the JVM's own rules, from its own metadata
//! read from the live process (vmstructs.rs), as the serviceability agent,
//! async-profiler and the OpenTelemetry eBPF profiler do. Compiled code
//! keeps no frame pointer, so the native unwinder (framehop, which falls
//! back to frame pointers in code outside every file) lost every caller.
//!
//! For a pc in the code cache (codecache.rs):
//! - the template interpreter: the frame pointer's frame; its method is
//!   in a slot of the frame, its caller's pc above the saved rbp, and the
//!   caller's sp (before the interpreter extended it) in the sender-sp slot;
//! - a compiled method or a stub with a frame: the caller's sp is
//!   sp + frame_size words, the return address just below it, the saved
//!   rbp below that (x86_64);
//! - a stub without a frame (the call stub, which a native caller entered
//!   Java through): its frame pointer's frame.
//!
//! Interpreted and compiled frames are named by their `Method`
//! (method.rs), as HotSpot's perf map names compiled code: an address at
//! NAMED_ADDR_BASE and up, named in the process's Maps record. A pc in a
//! block freed before the stack was read is counted and marked (the
//! stack then ends there), never named after what the block holds now.

mod codecache;
mod mem;
mod method;
mod vmstructs;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use wallclock_stream::{Frame, NamedAddr, NAMED_ADDR_BASE};

use codecache::{CodeCache, Found};
use mem::Mem;
use vmstructs::Layout;

use super::{At, Runtime, Step};

/// The marker of a frame whose code was freed before its stack was read.
pub const FREED: &str = "[JIT code freed before the stack was read]";
/// Tries to read the tables of a JVM that is still starting, one per
/// [`RETRY`] at most (each maps libjvm.so and reads its symbols again).
const TRIES: u32 = 5;
const RETRY: Duration = Duration::from_secs(1);
/// Once its layout is read, tries to read the code cache of a JVM that
/// has not made it yet, one per [`CACHE_RETRY`] (a few reads of its
/// memory): its threads' stacks before then are walked blind, and a
/// second of a launched JVM's first samples was lost so on a loaded
/// machine.
const CACHE_TRIES: u32 = 100;
const CACHE_RETRY: Duration = Duration::from_millis(100);

struct Jvm {
    mem: Mem,
    layout: Layout,
    cache: CodeCache,
    /// Method* -> its frame's address.
    methods: HashMap<u64, u64>,
    names: Vec<NamedAddr>,
    freed: u64,
    unnamed: u64,
}

enum State {
    Jvm(Box<Jvm>),
    /// Not a JVM (or not yet, when checked at `since`), or its tables
    /// could not be read after `tries` tries; `layout`, once read.
    No { since: Option<Instant>, tries: u32, error: Option<String>, layout: Option<Box<Layout>> },
    Failed(String),
}

/// The JVMs among the captured processes.
#[derive(Default)]
pub struct HotSpots {
    procs: HashMap<u32, State>,
    /// Time in the walk of JVMs' frames, and their stacks (readcost).
    pub cost: crate::runtimes::cost::Cost,
    /// When the stack being walked met its first JVM frame.
    since: Option<u64>,
}

fn address_of(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in "java::".bytes().chain(name.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    NAMED_ADDR_BASE | (h & 0x000f_ffff_ffff_fff0)
}

impl HotSpots {
    fn jvm(&mut self, pid: u32) -> Option<&mut Jvm> {
        if crate::runtimes::cost::off("hotspot") {
            return None;
        }
        let st = self.procs.entry(pid).or_insert(State::No { since: None, tries: 0, error: None, layout: None });
        if let State::No { since, tries, error, layout } = st {
            let retry = if layout.is_some() { CACHE_RETRY } else { RETRY };
            if since.is_some_and(|t| t.elapsed() < retry) {
                return None;
            }
            *since = Some(Instant::now());
            let mem = Mem { pid };
            if layout.is_none() {
                vmstructs::libjvm(pid)?;
                match vmstructs::read(pid, &mem) {
                    Ok(l) => *layout = Some(Box::new(l)),
                    Err(e) => {
                        *tries += 1;
                        if *tries >= TRIES {
                            *st = State::Failed(e);
                        } else {
                            *error = Some(e);
                        }
                        return None;
                    }
                }
                *tries = 0;
            }
            let l = layout.as_deref().expect("read above");
            match CodeCache::read(&mem, l) {
                Ok(cache) => {
                    let layout = *layout.take().expect("read above");
                    *st = State::Jvm(Box::new(Jvm { mem, layout, cache, methods: HashMap::new(), names: Vec::new(), freed: 0, unnamed: 0 }));
                }
                Err(e) => {
                    *tries += 1;
                    if *tries >= CACHE_TRIES {
                        *st = State::Failed(e);
                    } else {
                        *error = Some(e);
                    }
                    return None;
                }
            }
        }
        match st {
            State::Jvm(j) => Some(j),
            _ => None,
        }
    }

    fn step_frame(&mut self, pid: u32, at: At, stack: &dyn Fn(u64) -> Option<u64>, is_code: &dyn Fn(u64) -> bool) -> Step {
        let At { pc, leaf, sp, bp } = at;
        let Some(j) = self.jvm(pid) else { return Step::NotMine };
        // A return address may be the first byte past its blob.
        let look = if leaf { pc } else { pc - 1 };
        let found = match j.cache.find(&j.mem, &j.layout, look) {
            Ok(f) => f,
            // The process is gone, or the blob moved under the read.
            Err(_) => return if j.cache.contains(pc) { Step::Stop(None) } else { Step::NotMine },
        };
        let code = |a: u64, j: &Jvm| is_code(a) || j.cache.contains(a);
        match found {
            Found::Outside => Step::NotMine,
            Found::Freed => {
                j.freed += 1;
                Step::Stop(Some(j.marker()))
            }
            Found::Interpreter => {
                let (method_slot, sender_slot) = (j.layout.frame_method, j.layout.frame_sender_sp);
                let slot = |k: i64| stack(bp.wrapping_add_signed(k * 8));
                let name = slot(method_slot).and_then(|m| j.name(m));
                match (slot(1), slot(0), slot(sender_slot)) {
                    (Some(ret), Some(nbp), Some(nsp)) if bp >= sp && code(ret, j) => Step::Frame { ret, sp: nsp, bp: nbp, name },
                    _ => Step::Stop(name),
                }
            }
            Found::Blob(b) => {
                let name = (b.method != 0).then(|| j.name(b.method)).flatten();
                let in_prologue = leaf && b.frame_complete > 0 && pc < b.code_begin + b.frame_complete as u64;
                let by_size = (b.frame_size > 0 && !in_prologue).then(|| {
                    let csp = sp + b.frame_size * 8;
                    (stack(csp - 8), stack(csp - 16), csp)
                });
                let by_fp = (b.frame_size == 0 && bp >= sp).then(|| (stack(bp + 8), stack(bp), bp + 16));
                if let Some((Some(ret), Some(nbp), nsp)) = by_size.or(by_fp) {
                    if code(ret, j) {
                        return Step::Frame { ret, sp: nsp, bp: nbp, name };
                    }
                }
                // A leaf in a prologue or an epilogue (or a stub with no
                // frame): the return address at sp, or above a pushed rbp.
                if leaf {
                    if let Some(ret) = stack(sp).filter(|&r| code(r, j)) {
                        return Step::Frame { ret, sp: sp + 8, bp, name };
                    }
                    if let (Some(ret), Some(nbp)) = (stack(sp + 8).filter(|&r| code(r, j)), stack(sp)) {
                        return Step::Frame { ret, sp: sp + 16, bp: nbp, name };
                    }
                }
                Step::Stop(name)
            }
        }
    }
}

impl Runtime for HotSpots {
    fn name(&self) -> &'static str {
        "hotspot"
    }

    fn cost(&self) -> crate::runtimes::cost::Cost {
        self.cost
    }

    /// One frame `at`; `stack` reads a word of the copy of the stack, `is_code`
    /// tells whether an address is in a file's code.
    fn step(&mut self, pid: u32, at: At, stack: &dyn Fn(u64) -> Option<u64>, is_code: &dyn Fn(u64) -> bool) -> Step {
        // Timed from a JVM's first frame to the stack's end (the native
        // frames under Java's, a few, are framehop's, from memory); one
        // clock read a stack, in a JVM only.
        if self.since.is_none() && matches!(self.procs.get(&pid), Some(State::Jvm(_))) {
            self.since = Some(crate::runtimes::cost::now());
        }
        self.step_frame(pid, at, stack, is_code)
    }

    /// The end of a stack's walk: counted when it met a JVM frame.
    fn end_stack(&mut self) {
        if let Some(t0) = self.since.take() {
            self.cost.stack(t0);
        }
    }

    /// 1 once the JVM's tables are read, 2 once its interpreter is
    /// known too: its stacks walked before then (its frames each
    /// `Interpreter`, or cut at compiled code) are read whole and named
    /// now. A code cache read before the interpreter was generated left
    /// a launched JVM's sleep loop, blocked from its first second,
    /// `Interpreter;...;JVM_Sleep` for the whole capture (45% of the
    /// sleep thread's waits, in a fresh-clone run).
    fn epoch(&self, pid: u32) -> u32 {
        match self.procs.get(&pid) {
            Some(State::Jvm(j)) => 1 + u32::from(j.cache.interp_known()),
            _ => 0,
        }
    }

    /// Is `a` a frame this reader named, or code in the JVM's code cache?
    /// (Not a library mapped since the maps were read.)
    fn is_code(&self, pid: u32, a: u64) -> bool {
        match self.procs.get(&pid) {
            Some(State::Jvm(j)) => a >= NAMED_ADDR_BASE || j.cache.contains(a),
            _ => false,
        }
    }

    /// Names of the frames of `pid` (for its Maps record).
    fn names(&self, pid: u32) -> Vec<NamedAddr> {
        match self.procs.get(&pid) {
            Some(State::Jvm(j)) => j.names.clone(),
            _ => Vec::new(),
        }
    }

    /// One line per JVM whose frames were not all walked and named: what
    /// it cost, and why.
    fn advice(&self) -> Vec<String> {
        let mut pids: Vec<&u32> = self.procs.keys().collect();
        pids.sort_unstable();
        let mut out = Vec::new();
        for pid in pids {
            match &self.procs[pid] {
                State::Failed(e) | State::No { error: Some(e), .. } => out.push(format!(
                    "pid {pid} (JVM): cannot read HotSpot's layout tables ({e}): its Java stacks are cut in JIT code, as without this reader (start java with -XX:+PreserveFramePointer for whole stacks)"
                )),
                State::Jvm(j) if j.freed > 0 => out.push(format!(
                    "pid {pid} (JVM): {} stacks ran JIT code freed before they were read: they end at {FREED}",
                    j.freed
                )),
                _ => {}
            }
            if let State::Jvm(j) = &self.procs[pid] {
                if j.unnamed > 0 {
                    out.push(format!("pid {pid} (JVM): {} Java frames whose method could not be read keep the code's address (named by the perf map, if any)", j.unnamed));
                }
            }
        }
        out
    }
}

impl Jvm {
    fn add(&mut self, name: &str) -> u64 {
        let a = address_of(name);
        if !self.names.iter().any(|n| n.addr == a) {
            self.names.push(NamedAddr { addr: a, frame: Frame::named(name) });
        }
        a
    }

    fn marker(&mut self) -> u64 {
        self.add(FREED)
    }

    fn name(&mut self, method: u64) -> Option<u64> {
        if let Some(&a) = self.methods.get(&method) {
            return Some(a);
        }
        match method::name(&self.mem, &self.layout, method) {
            Ok(n) => {
                let n = wallclock_stream::names::check(&n).into_owned();
                let a = self.add(&n);
                self.methods.insert(method, a);
                Some(a)
            }
            Err(_) => {
                self.unnamed += 1;
                None
            }
        }
    }
}
