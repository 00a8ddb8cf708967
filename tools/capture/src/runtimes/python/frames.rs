//! Python frames without `-X perf`: the interpreter's own frame chain, read
//! by the BPF side where a stack is taken (bpf/python.bpf.h), named here
//! and put where CPython ran it, so that native and Python frames
//! interleave.
//!
//! While the capture runs, [`Python::refresh`] finds the CPython 3.9-3.15
//! of each target process ([`Interpreter::find`]), tells the BPF side
//! where that version keeps its frame chain (`py_cfg`), and lists its
//! threads (`py_threads`: tid -> thread state), again at every turn of
//! the capture loop. A thread born since is looked for in the
//! interpreter's list by the BPF side at its first stack (3.11+), so its
//! frames are read from its first stacks on.
//!
//! A stack event then carries the thread's frames, innermost first: code
//! object, instruction pointer, flags. [`Python::splice`] cuts them into
//! the runs that one `_PyEval_EvalFrameDefault` call executes (3.9, 3.10:
//! one frame each; 3.11 marks a run's outermost frame `is_entry`; 3.12+ push a
//! frame owned by the C stack under it) and puts each run right above the native frame of that
//! call, innermost run on the innermost call (crate::runtimes::splice); a run whose
//! call the native unwind lost goes at the root, then `[truncated]`. Each Python frame becomes an
//! address at [`NAMED_ADDR_BASE`] and up, named in the process's Maps
//! record (`py::QUALNAME:FILE` as CPython's perf map writes it for
//! `-X perf`, with the file and the line of the instruction), so a
//! workload gives the same names with or without `-X perf`.
//!
//! A code object is read when a stack shows it, while its process lives,
//! and cached by address and by its name, file and table objects (one is
//! freed and another made at its address: seen at startup). A code object
//! freed between the stack and its reading here names nothing (or, its
//! memory reused by another code object, that one).

use std::collections::{HashMap, HashSet};

use libbpf_rs::MapFlags;
use wallclock_stream::{Frame, NamedAddr, NAMED_ADDR_BASE};

use super::offsets::{owner_is_function, Offsets, FRAME_OWNED_BY_CSTACK};
use super::reader::{Interpreter, PyFrame};
use super::trampoline::Trampolines;
use crate::event::{as_bytes, WcEvent, WcPyframe};
use crate::runtimes::{At, BpfMaps, Runtime, Step};

/// The interpreter of one process and the frames named in it.
struct Proc {
    it: Interpreter,
    /// (name, line) -> its address in the stacks.
    addr: HashMap<(String, Option<i64>), u64>,
    names: Vec<NamedAddr>,
    /// Threads listed in `py_threads`.
    tids: HashSet<u32>,
    /// Their `threading` names, once read (see threadname.rs), and how
    /// often each unnamed one was tried (the main thread never is).
    thread_names: HashMap<u32, String>,
    name_tries: HashMap<u32, u32>,
}

/// Turns of the capture loop (20 ms each) a thread's name is looked for.
const NAME_TRIES: u32 = 50;

/// The Python processes of a capture.
#[derive(Default)]
pub struct Python {
    procs: HashMap<u32, Proc>,
    /// Time naming and placing the frames of stacks, and the stacks
    /// (readcost: `python_ns`, `python_stacks`).
    pub cost: crate::runtimes::cost::Cost,
    /// Processes found not to run a supported CPython, with the file that
    /// said so (looked at again only when another file is mapped).
    not_python: HashMap<u32, String>,
    /// `-X perf`'s trampolines (anonymous code without unwind info), of
    /// any process: walked through, and left out of a stack that carries
    /// the frames they stand for.
    trampolines: Trampolines,
}

/// The file /proc/PID/maps would make the interpreter's, if any.
fn candidate(pid: u32) -> Option<String> {
    let maps = wallclock_stream::procmaps::read(pid)?;
    let mut found: Option<String> = None;
    for m in &maps {
        let path = m.entry.path.as_str();
        let name = path.rsplit('/').next().unwrap_or("");
        if name.starts_with("libpython3.") {
            return Some(path.to_string());
        }
        if name.starts_with("python3.") && found.is_none() {
            found = Some(path.to_string());
        }
    }
    found
}

impl Runtime for Python {
    fn name(&self) -> &'static str {
        "python"
    }

    fn versions(&self) -> Vec<String> {
        super::offsets::versions()
    }

    fn cost(&self) -> crate::runtimes::cost::Cost {
        self.cost
    }

    /// Find the interpreters of `pids` not seen yet and list every known
    /// interpreter's threads into the BPF maps. Cheap when nothing changed:
    /// a few reads of each interpreter's thread list. Whether an
    /// interpreter was added to `cfg`.
    fn refresh(&mut self, pids: &[u32], maps: &BpfMaps<'_>) -> bool {
        let (threads, cfg) = (maps.py_threads, maps.py_cfg);
        let mut found = false;
        if crate::runtimes::cost::off("python") {
            return found;
        }
        for &pid in pids {
            if !self.procs.contains_key(&pid) {
                let Some(file) = candidate(pid) else { continue };
                if self.not_python.get(&pid) == Some(&file) {
                    continue;
                }
                match Interpreter::find(pid) {
                    Ok(it) => {
                        let c = config(&it);
                        if cfg.update(&pid.to_ne_bytes(), as_bytes(&c), MapFlags::ANY).is_err() {
                            continue;
                        }
                        found = true;
                        self.procs.insert(
                            pid,
                            Proc {
                                it,
                                addr: HashMap::new(),
                                names: Vec::new(),
                                tids: HashSet::new(),
                                thread_names: HashMap::new(),
                                name_tries: HashMap::new(),
                            },
                        );
                    }
                    Err(_) => {
                        self.not_python.insert(pid, file);
                        continue;
                    }
                }
            }
            let p = self.procs.get_mut(&pid).unwrap();
            p.it.new_turn();
            // A thread list being changed can read short: the next turn
            // reads it again.
            let Ok(list) = p.it.thread_states() else { continue };
            let now: HashSet<u32> = list.iter().map(|t| t.0).collect();
            for (tid, ts) in list {
                let _ = threads.update(&tid.to_ne_bytes(), &ts.to_ne_bytes(), MapFlags::ANY);
                if tid != pid && !p.thread_names.contains_key(&tid) {
                    let tries = p.name_tries.entry(tid).or_insert(0);
                    if *tries < NAME_TRIES {
                        *tries += 1;
                        if let Some(n) = p.it.thread_name(ts) {
                            p.thread_names.insert(tid, n);
                        }
                    }
                }
            }
            for gone in p.tids.difference(&now) {
                let _ = threads.delete(&gone.to_ne_bytes());
            }
            p.tids = now;
        }
        found
    }

    /// Whether `pid` was found to run CPython.
    fn owns(&self, pid: u32) -> bool {
        self.procs.contains_key(&pid)
    }

    /// A forked child runs its parent's trampolines.
    fn fork(&mut self, parent: u32, child: u32) {
        self.trampolines.fork(parent, child);
    }

    /// A frame in a `-X perf` trampoline of `pid`, stepped past.
    fn step(&mut self, pid: u32, at: At, read: &dyn Fn(u64) -> Option<u64>, _in_files: &dyn Fn(u64) -> bool) -> Step {
        match self.trampolines.step(pid, at.pc, at.leaf, at.sp, &mut |x| read(x)) {
            Some(s) => Step::Frame { ret: s.ret, sp: s.sp, bp: at.bp, name: None },
            None => Step::NotMine,
        }
    }

    /// The `threading.Thread` name of thread `tid` of `pid`, if read
    /// while it ran (CPython does not give it to the OS thread: its OS
    /// name is the interpreter's, the same for every thread).
    fn thread_name(&self, pid: u32, tid: u32) -> Option<&str> {
        self.procs.get(&pid)?.thread_names.get(&tid).map(String::as_str)
    }

    /// The frames named in `pid`, for its Maps record.
    fn names(&self, pid: u32) -> Vec<NamedAddr> {
        self.procs.get(&pid).map(|p| p.names.clone()).unwrap_or_default()
    }

    /// `native` (root first) with the Python frames of `e` put in.
    fn splice(&mut self, e: &WcEvent, mut native: Vec<u64>, in_file: &[bool]) -> Vec<u64> {
        let n = (e.py_n as usize).min(e.py.len());
        if n == 0 {
            return native;
        }
        let Some(p) = self.procs.get_mut(&e.pid) else { return native };
        // Under -X perf too: the Python frames read from the interpreter
        // stand for its trampolines' perf-map names (the same names, with
        // lines), which would repeat each one.
        let mut i = 0;
        native.retain(|&a| {
            i += 1;
            in_file[i - 1] || !self.trampolines.contains(e.pid, a)
        });
        let t0 = crate::runtimes::cost::now();
        let o = p.it.offsets;
        let runs = cut(&e.py[..n], &o, |code, instr| p.name(code, instr));
        // The native frames of _PyEval_EvalFrameDefault, innermost first:
        // each run has one, so a run without one is a cut (splice.rs).
        let in_eval = |a: u64| p.it.eval.iter().any(|&(s, e)| a > s && a <= e);
        let evals: Vec<usize> = (0..native.len()).rev().filter(|&i| in_eval(native[i])).collect();
        // A frame in a part of it that has no symbol (a stripped file's
        // split-off opcodes) is named as the function it is part of:
        // nothing else would name it (it showed as `python3.11+0x32a13`).
        for &i in &evals {
            if p.it.eval_unnamed.iter().any(|&(s, e)| native[i] > s && native[i] <= e) {
                native[i] = p.eval_addr();
            }
        }
        let v = crate::runtimes::splice::place(&native, &evals, crate::runtimes::splice::Rest::Cut, runs);
        self.cost.stack(t0);
        v
    }
}

/// The Python frames of a stack (innermost first) cut into the runs that
/// one `_PyEval_EvalFrameDefault` call executes, innermost run first, each
/// named by `name` (code object, instruction pointer) and innermost first.
/// A frame that names no code object (being changed as it was read, in an
/// on-CPU sample) is left out, its run kept.
fn cut(frames: &[WcPyframe], o: &Offsets, mut name: impl FnMut(u64, u64) -> Option<u64>) -> Vec<Vec<u64>> {
    let mut runs: Vec<Vec<u64>> = vec![Vec::new()];
    for f in frames {
        let b = f.flags.to_le_bytes();
        let (entry, owner) = if o.frame_is_entry.is_some() { (b[0] != 0, b[1]) } else { (false, b[0]) };
        if o.minor >= 12 && !owner_is_function(owner) {
            // An eval call's entry frame ends a run (3.14's other C-stack
            // frames, owner 4, are only skipped).
            if owner == FRAME_OWNED_BY_CSTACK {
                runs.push(Vec::new());
            }
            continue;
        }
        if let Some(a) = name(f.code, f.instr) {
            runs.last_mut().unwrap().push(a);
        }
        // 3.9 and 3.10 run each Python frame in a C call of its own.
        if entry || o.frame_objects() {
            runs.push(Vec::new());
        }
    }
    // The last run is empty (nothing after the outermost frame; 3.15's
    // thread has a base frame of its own under its first eval call's
    // entry frame, a second empty one); a run whose every frame failed to
    // be named still has its eval frame, except rootward of every other.
    while runs.last().is_some_and(Vec::is_empty) {
        runs.pop();
    }
    runs
}

impl Proc {
    /// The address that stands for `_PyEval_EvalFrameDefault` where the
    /// file does not name it (see `splice`).
    fn eval_addr(&mut self) -> u64 {
        const EVAL: &str = "_PyEval_EvalFrameDefault";
        if let Some(&a) = self.addr.get(&(EVAL.to_string(), None)) {
            return a;
        }
        let a = address_of(EVAL, None);
        self.addr.insert((EVAL.to_string(), None), a);
        self.names.push(NamedAddr { addr: a, frame: Frame::named(EVAL.to_string()) });
        a
    }

    /// The address that stands for code object `code` at `instr`.
    fn name(&mut self, code: u64, instr: u64) -> Option<u64> {
        let PyFrame { name, file, line } = self.it.frame_at(code, instr).ok()?;
        // Read from the target's memory, maybe while it was freed (seen:
        // `py::\0\0\0\0:weakref.py`): what is not text is marked.
        let func = wallclock_stream::names::check(&format!("py::{name}:{file}")).into_owned();
        let file = wallclock_stream::names::check(&file).into_owned();
        if let Some(&a) = self.addr.get(&(func.clone(), line)) {
            return Some(a);
        }
        let a = address_of(&func, line);
        self.addr.insert((func.clone(), line), a);
        let frame = Frame { file: Some(file), line: line.and_then(|l| u32::try_from(l).ok()), ..Frame::named(func) };
        self.names.push(NamedAddr { addr: a, frame });
        Some(a)
    }
}

/// The address that stands for a frame: from its name and line alone, so
/// that every capture tool gives one frame the same address (oncputime's
/// and offcputime's streams meet in stackmerge with their Maps records):
/// FNV-1a, 48 bits of it above [`NAMED_ADDR_BASE`].
fn address_of(func: &str, line: Option<i64>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in func.bytes().chain(line.unwrap_or(-1).to_le_bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    NAMED_ADDR_BASE | (h & 0x000f_ffff_ffff_fff0)
}

/// Where the interpreter keeps its frame chain, for the BPF side.
fn config(it: &Interpreter) -> crate::event::WcPycfg {
    let o = it.offsets;
    let flags = o.frame_is_entry.unwrap_or(o.frame_owner);
    let span = [o.frame_code + 8, o.frame_instr + 8, o.frame_previous + 8, flags + 2].into_iter().max().unwrap_or(0);
    crate::event::WcPycfg {
        frame: o.tstate_frame as u32,
        cframe: o.cframe_current.map_or(-1, |c| c as i32),
        code: o.frame_code as u32,
        instr: o.frame_instr as u32,
        flags: flags as u32,
        previous: o.frame_previous as u32,
        // 3.9's and 3.10's tid is behind its pthread_t: user space lists those.
        runtime_interp: if o.tstate_is_pthread { 0 } else { it.runtime() + o.runtime_interpreters_head },
        interp_threads: o.interp_threads_head as u32,
        tstate_tid: o.tstate_native_thread_id as u32,
        tstate_next: o.tstate_next as u32,
        span: span as u32,
        tls_off: 0,
        tls_add: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::super::offsets::{PY310, PY311, PY312};
    use super::*;

    fn frames(v: &[(u64, u32)]) -> Vec<WcPyframe> {
        v.iter().map(|&(code, flags)| WcPyframe { code, instr: 0, flags, pad: 0 }).collect()
    }

    #[test]
    fn a_frame_has_one_address_everywhere() {
        let a = address_of("py::f:/a.py", Some(3));
        assert_eq!(a, address_of("py::f:/a.py", Some(3)));
        assert!(a >= NAMED_ADDR_BASE);
        assert_ne!(a, address_of("py::f:/a.py", Some(4)));
        assert_ne!(a, address_of("py::f:/a.py", None));
        assert_ne!(a, address_of("py::g:/a.py", Some(3)));
    }

    #[test]
    fn runs_by_version() {
        let id = |c: u64, _| Some(c);
        // 3.12+: a frame owned by the C stack (3) under each run.
        let f = frames(&[(1, 0), (2, 0), (0, 3), (3, 1), (0, 3)]);
        assert_eq!(cut(&f, &PY312, id), vec![vec![1, 2], vec![3]]);
        // 3.11: the outermost frame of a run is_entry (byte 0; owner byte 1).
        let f = frames(&[(1, 0), (2, 1), (3, 0x0101)]);
        assert_eq!(cut(&f, &PY311, id), vec![vec![1, 2], vec![3]]);
        // 3.10: one frame a run; a frame naming no code is left out.
        // A run none of whose frames is named keeps its place (its
        // eval frame): the runs rootward of it stay on theirs.
        let f = frames(&[(1, 0), (2, 0), (3, 0)]);
        assert_eq!(cut(&f, &PY310, |c, _| (c != 2).then_some(c)), vec![vec![1], vec![], vec![3]]);
    }
}
