//! The runtime readers: what names and places the frames of a runtime
//! (CPython, PHP, Ruby, HotSpot, V8, BEAM) in the native stacks the unwinder
//! walks. Each reader is a room of its own here and implements
//! [`Runtime`]; the unwinder and the capture driver know only the
//! [`Runtimes`] registry, which asks every reader in turn. A runtime
//! version's layout is data in its reader's room (python/offsets.rs,
//! ruby/reader.rs's `Layout`, php/reader.rs, hotspot/vmstructs.rs, the
//! metadata V8 carries, read by v8/meta.rs).
//!
//! A stack meets the readers at five points, in this order:
//! - the copy of the stack to unwind ([`Runtime::stack`]: Ruby joins its
//!   VM stack's far side to it);
//! - each frame of the walk in code outside every file ([`Runtime::step`]:
//!   HotSpot's JIT frames, CPython's `-X perf` trampolines);
//! - the unwound stack, named in place ([`Runtime::name_frames`]: V8's
//!   JavaScript frames, by the function each frame holds; BEAM's Erlang
//!   frames, with their callers from the Erlang process's stack);
//! - the interpreter's own frames spliced in ([`Runtime::splice`]: the one
//!   reader that found `pid` to run its runtime);
//! - the Maps record ([`Runtime::names`]), the stats trailer
//!   ([`Runtime::cost`], [`Runtime::stats`]) and the advice lines at the
//!   stop ([`Runtime::advice`]).
//!
//! The versions a reader reads are its tables' ([`Runtime::versions`]),
//! written to the stream's header (`runtime_versions`), from which the
//! report says what a capture could read.

pub mod beam;
pub mod cost;
pub mod hotspot;
pub mod jitcode;
pub mod jvm;
pub mod php;
pub mod python;
pub mod ruby;
pub mod splice;
pub mod v8;

use std::borrow::Cow;

use libbpf_rs::MapCore;
use wallclock_stream::{MapEntry, NamedAddr, Thread};

use crate::event::WcEvent;
use cost::Cost;

/// The kernel maps nothing below this (vm.mmap_min_addr's default).
pub const MIN_CODE_ADDR: u64 = 0x10000;

/// The BPF maps (capture.bpf.h) a reader tells where a process's frames
/// are: the threads and frame-chain layout of the walker of
/// bpf/python.bpf.h (CPython, PHP), Ruby's of bpf/ruby.bpf.h.
pub struct BpfMaps<'a> {
    pub py_threads: &'a dyn MapCore,
    pub py_cfg: &'a dyn MapCore,
    pub rb_cfg: &'a dyn MapCore,
}

/// Where a frame of the walk is: its pc (a return address unless
/// `leaf`), sp, rbp.
#[derive(Clone, Copy)]
pub struct At {
    pub pc: u64,
    pub leaf: bool,
    pub sp: u64,
    pub bp: u64,
}

/// One step of a walk through a runtime's code.
pub enum Step {
    /// Not this runtime's code: the next reader's turn, then the native
    /// unwinder's.
    NotMine,
    /// The caller's pc, sp and rbp, and the name of this frame, if any
    /// (its address replaces the pc).
    Frame { ret: u64, sp: u64, bp: u64, name: Option<u64> },
    /// The walk cannot go on; the frame's address, if marked.
    Stop(Option<u64>),
}

/// A stack just unwound, for [`Runtime::name_frames`].
pub struct Unwound<'a> {
    pub pid: u32,
    /// Its CLOCK_MONOTONIC time.
    pub ts: u64,
    /// Root first. A reader may put frames in or take them out (BEAM's
    /// callers, read from the Erlang process's own stack), as the last
    /// reader to name a stack: the frame pointers then no longer match.
    pub native: &'a mut Vec<u64>,
    /// The frame pointer of each frame (0 where unknown).
    pub fps: &'a [u64],
    /// The copy of the stack taken with it: (sp, its bytes).
    pub copy: (u64, &'a [u8]),
    /// The process's file mappings as the unwinder knows them.
    pub maps: &'a [MapEntry],
    /// Set by a reader whose frames went on past the copy: the unwinder
    /// marks the stack cut.
    pub cut: bool,
}

/// What every runtime reader does; each default is "nothing of mine".
pub trait Runtime {
    /// Its name, as `WALLCLOCK_NO_RUNTIMES` and the stats trailer say it.
    fn name(&self) -> &'static str;
    /// Find the runtime in `pids` not seen yet and tell the BPF side where
    /// their frames are, at the start and at every turn of the capture
    /// loop. Whether one was added (the BPF side then reads again).
    fn refresh(&mut self, _pids: &[u32], _maps: &BpfMaps<'_>) -> bool {
        false
    }
    /// `pid` exec'd: a reader that must know it from its first stacks
    /// looks now, not a turn later. As [`Runtime::refresh`].
    fn at_exec(&mut self, _pid: u32, _maps: &BpfMaps<'_>) -> bool {
        false
    }
    /// A new process `child` of `parent` (before its exec it runs its
    /// parent's code at the same addresses).
    fn fork(&mut self, _parent: u32, _child: u32) {}
    /// Whether `pid` was found to run this runtime.
    fn owns(&self, _pid: u32) -> bool {
        false
    }
    /// The copy of the stack to unwind for `e`, where this reader makes it
    /// whole; None: the event's own copy.
    fn stack<'a>(&mut self, _e: &'a WcEvent) -> Option<Cow<'a, [u8]>> {
        None
    }
    /// The stack [`Runtime::stack`] gave, back once unwound.
    fn recycle(&mut self, _s: Cow<'_, [u8]>) {}
    /// One frame of the walk at code outside every file; `read` reads a
    /// word of the copy of the stack, `in_files` tells whether an address
    /// is in a file's code.
    fn step(&mut self, _pid: u32, _at: At, _read: &dyn Fn(u64) -> Option<u64>, _in_files: &dyn Fn(u64) -> bool) -> Step {
        Step::NotMine
    }
    /// The walk of a stack ended.
    fn end_stack(&mut self) {}
    /// How much it has learned of `pid`, a count that grows when stacks
    /// of `pid` it could not read before (its tables not yet readable,
    /// as in a JVM still starting) may now be read: a stack cut short
    /// before then is worth copying again.
    fn epoch(&self, _pid: u32) -> u32 {
        0
    }
    /// Whether `a` is a frame this reader named or code of its runtime's
    /// own (not a library mapped since the maps were read).
    fn is_code(&self, _pid: u32, _a: u64) -> bool {
        false
    }
    /// Name the frames of a stack just unwound, in place.
    fn name_frames(&mut self, _s: &mut Unwound<'_>) {}
    /// `native` (root first) with the runtime's frames of `e` put in, for
    /// a process it [`Runtime::owns`]; `in_file` says which frames are in
    /// a file's code (not JIT code, not the cut marker).
    fn splice(&mut self, _e: &WcEvent, native: Vec<u64>, _in_file: &[bool]) -> Vec<u64> {
        native
    }
    /// The frames named in `pid`, for its Maps record.
    fn names(&self, _pid: u32) -> Vec<NamedAddr> {
        Vec::new()
    }
    /// The name the program gave thread `tid` of `pid`, if it is not the
    /// OS's (CPython's `threading` names).
    fn thread_name(&self, _pid: u32, _tid: u32) -> Option<&str> {
        None
    }
    /// Its CPU time per stack (cost.rs), for the stats trailer.
    fn cost(&self) -> Cost {
        Cost::default()
    }
    /// Its own counts for the stats trailer.
    fn stats(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
    /// Lines for stderr at the stop: what was not read, and what to do.
    fn advice(&self) -> Vec<String> {
        Vec::new()
    }
    /// The versions of its runtime whose frames it reads (`3.9`...), from
    /// its own layout tables, for the stream's header; empty where it
    /// reads what the runtime publishes of any version (none listed).
    fn versions(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Every reader, asked in this order: HotSpot's walk before CPython's
/// trampolines; the interpreters' splices Ruby, PHP, CPython (a process
/// is one of them); the trailer's costs hotspot, v8, php, python, beam.
pub struct Runtimes {
    readers: Vec<Box<dyn Runtime>>,
    /// The reader whose [`Runtime::stack`] is being unwound.
    lent: Option<usize>,
}

impl Default for Runtimes {
    fn default() -> Self {
        let readers: Vec<Box<dyn Runtime>> = vec![
            Box::<hotspot::HotSpots>::default(),
            Box::<v8::V8>::default(),
            Box::<ruby::Ruby>::default(),
            Box::<php::Php>::default(),
            Box::<python::frames::Python>::default(),
            // Last: it changes the stacks' length (Unwound::native).
            Box::<beam::Beam>::default(),
        ];
        Runtimes { readers, lent: None }
    }
}

impl Runtimes {
    /// Each reader's [`Runtime::refresh`], whatever the others found.
    pub fn refresh(&mut self, pids: &[u32], maps: &BpfMaps<'_>) -> bool {
        self.readers.iter_mut().fold(false, |found, r| r.refresh(pids, maps) | found)
    }

    pub fn at_exec(&mut self, pid: u32, maps: &BpfMaps<'_>) -> bool {
        self.readers.iter_mut().fold(false, |found, r| r.at_exec(pid, maps) | found)
    }

    pub fn fork(&mut self, parent: u32, child: u32) {
        self.readers.iter_mut().for_each(|r| r.fork(parent, child));
    }

    /// The copy of the stack to unwind for `e`; give it back with
    /// [`Runtimes::recycle`].
    pub fn stack<'a>(&mut self, e: &'a WcEvent) -> Cow<'a, [u8]> {
        for (i, r) in self.readers.iter_mut().enumerate() {
            if let Some(s) = r.stack(e) {
                self.lent = Some(i);
                return s;
            }
        }
        Cow::Borrowed(e.ustack_bytes())
    }

    pub fn recycle(&mut self, s: Cow<'_, [u8]>) {
        if let Some(i) = self.lent.take() {
            self.readers[i].recycle(s);
        }
    }

    /// The first reader's step that is not [`Step::NotMine`].
    pub fn step(&mut self, pid: u32, at: At, read: &dyn Fn(u64) -> Option<u64>, in_files: &dyn Fn(u64) -> bool) -> Step {
        for r in self.readers.iter_mut() {
            match r.step(pid, at, read, in_files) {
                Step::NotMine => {}
                s => return s,
            }
        }
        Step::NotMine
    }

    pub fn end_stack(&mut self) {
        self.readers.iter_mut().for_each(|r| r.end_stack());
    }

    /// The sum of the readers' [`Runtime::epoch`] for `pid`.
    pub fn epoch(&self, pid: u32) -> u32 {
        self.readers.iter().map(|r| r.epoch(pid)).sum()
    }

    pub fn is_code(&self, pid: u32, a: u64) -> bool {
        self.readers.iter().any(|r| r.is_code(pid, a))
    }

    pub fn name_frames(&mut self, s: &mut Unwound<'_>) {
        self.readers.iter_mut().for_each(|r| r.name_frames(s));
    }

    /// `native` with the interpreter frames of `e` put in by the reader
    /// that owns its process; `in_file` tells whether an address is in a
    /// file's code (asked only where there is one).
    pub fn splice(&mut self, e: &WcEvent, native: Vec<u64>, in_file: impl Fn(u64) -> bool) -> Vec<u64> {
        match self.readers.iter_mut().find(|r| r.owns(e.pid)) {
            Some(r) => {
                let in_file: Vec<bool> = native.iter().map(|&a| in_file(a)).collect();
                r.splice(e, native, &in_file)
            }
            None => native,
        }
    }

    pub fn names(&self, pid: u32) -> Vec<NamedAddr> {
        self.readers.iter().flat_map(|r| r.names(pid)).collect()
    }

    /// Each thread of `threads` a runtime names otherwise than the OS
    /// gets that name as its `comm`.
    pub fn name_threads<'a>(&self, threads: impl Iterator<Item = &'a mut Thread>) {
        for t in threads {
            if let Some(n) = self.readers.iter().find_map(|r| r.thread_name(t.pid, t.tid)) {
                t.comm = n.to_string();
            }
        }
    }

    /// The readers' costs (`<reader>_ns`, `<reader>_stacks`) and counts,
    /// for the stats trailer.
    pub fn stats(&self) -> Vec<(String, u64)> {
        let costs: Vec<(&str, Cost)> = self.readers.iter().map(|r| (r.name(), r.cost())).collect();
        let mut v = cost::stats(&costs);
        v.extend(self.readers.iter().flat_map(|r| r.stats()));
        v
    }

    pub fn advice(&self) -> Vec<String> {
        self.readers.iter().flat_map(|r| r.advice()).collect()
    }

    /// Each reader's [`Runtime::versions`] by its name, those that list
    /// some: the header's `runtime_versions`.
    pub fn versions(&self) -> std::collections::BTreeMap<String, Vec<String>> {
        self.readers.iter().map(|r| (r.name().to_string(), r.versions())).filter(|(_, v)| !v.is_empty()).collect()
    }
}

/// The perf map process `pid` wrote (`node --perf-basic-prof`, `erl
/// +JPperf true`): `/tmp/perf-N.map` in its own root under the pid N it
/// knows itself by, as stacksym reads it, opened as a file the process
/// controls. A map older than the process is none: an earlier process's
/// with the same pid (pids wrap at 32768 by default, and every JVM,
/// node or VM a test suite ran left its map). Shown as its host path.
pub(crate) fn perf_map(pid: u32) -> Option<String> {
    use wallclock_stream::safe_open;
    let inside = format!("/tmp/perf-{}.map", jvm::ns_pid(pid)?);
    let file = safe_open::open_in_root(pid, &inside, safe_open::owner_of(pid)).ok()??;
    (safe_open::older_than_process(&file, pid) != Some(true)).then(|| format!("/proc/{pid}/root{inside}"))
}

#[cfg(test)]
mod tests {
    /// The registry lists the versions of each reader whose versions are
    /// its tables', under its name, and no empty list.
    #[test]
    fn versions_by_reader() {
        let v = super::Runtimes::default().versions();
        assert_eq!(v.keys().map(String::as_str).collect::<Vec<_>>(), ["php", "python", "ruby"]);
        assert_eq!(v["python"], super::python::offsets::versions());
        assert_eq!(v["php"], super::php::reader::versions());
        assert_eq!(v["ruby"], super::ruby::reader::versions());
    }

    /// A perf map left under a pid by an earlier process (written before
    /// this one started) is not this one's; rewritten since, it is.
    #[test]
    fn perf_map_of_an_earlier_process_with_the_pid_is_none() {
        use std::time::{Duration, SystemTime};
        let mut child = std::process::Command::new("sleep").arg("10").spawn().unwrap();
        let pid = child.id();
        let path = format!("/tmp/perf-{pid}.map");
        std::fs::write(&path, "1000 10 old\n").unwrap();
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(3600)).unwrap();
        let old = super::perf_map(pid);
        f.set_modified(SystemTime::now()).unwrap();
        let new = super::perf_map(pid);
        std::fs::remove_file(&path).ok();
        child.kill().ok();
        child.wait().ok();
        assert_eq!(old, None, "a map older than the process is taken for its own");
        assert_eq!(new, Some(format!("/proc/{pid}/root{path}")));
    }
}
