//! PHP frames with no flag: the executor's own call chain (reader.rs),
//! walked by the BPF side where a stack is taken, with the walker CPython's
//! frames use (bpf/python.bpf.h: a chain of records, each read whole, its
//! "code", "instruction" and flags taken at configured offsets), named
//! here and put above the `execute_ex` native frames that ran them.
//!
//! For a PHP process, `py_cfg` says: the "thread state" is
//! `executor_globals`, its frame pointer `current_execute_data`, a
//! frame's code its `func`, its instruction its `opline`, its flags the
//! call-info half of `This.u1.type_info`, its previous
//! `prev_execute_data`. An NTS build's CLI runs its script on the main
//! thread only: `py_threads` lists that thread alone. A thread-safe (ZTS)
//! build has one set of globals per thread, in the thread's TSRM block:
//! `py_cfg` says where the thread's TLS points to it (`tls_off`) and the
//! globals' offset in it (`tls_add`), and the BPF side finds each
//! thread's from its thread pointer.
//!
//! One `execute_ex` call runs the frames from the innermost up to the
//! first one marked `ZEND_CALL_TOP` (called from C: `zend_execute`, or
//! `zend_call_function` for a callback of an internal function): those
//! runs go above the `execute_ex` frames, innermost on the innermost, as
//! Python's runs go above `_PyEval_EvalFrameDefault`. An internal
//! function's frame is left out: its C function is a native frame
//! already (`zif_usleep`). Under opcache's JIT, the JIT code that runs a
//! function leaves no `execute_ex` frame of its own; the runs then go
//! above the innermost frame of the executable, else at the root of a
//! stack cut short (after its `[truncated]`).

pub mod reader;

use std::collections::HashMap;

use libbpf_rs::MapFlags;
use wallclock_stream::{Frame, NamedAddr, NAMED_ADDR_BASE};

use crate::event::{as_bytes, WcEvent, WcPyframe};
use crate::runtimes::{BpfMaps, Runtime};
use reader::Executor;

struct Proc {
    ex: Executor,
    /// (name, line) -> its address in the stacks.
    addr: HashMap<(String, Option<u32>), u64>,
    names: Vec<NamedAddr>,
}

/// The PHP processes of a capture.
#[derive(Default)]
pub struct Php {
    procs: HashMap<u32, Proc>,
    /// Processes looked at and found not to run a PHP read (reader.rs's versions; or not readable),
    /// with the executable that said so.
    not_php: HashMap<u32, String>,
    /// Frames whose function could not be read (freed as it was read):
    /// marked, never named as another.
    pub unread: u64,
    /// Time naming and placing frames, and the stacks read (readcost).
    pub cost: crate::runtimes::cost::Cost,
}

/// The name of a frame whose function could not be read.
const UNREAD: &str = "php::[unreadable frame]";

impl Runtime for Php {
    fn name(&self) -> &'static str {
        "php"
    }

    fn versions(&self) -> Vec<String> {
        reader::versions()
    }

    fn cost(&self) -> crate::runtimes::cost::Cost {
        self.cost
    }

    /// Find the PHP executors read among `pids` not seen yet and tell the
    /// BPF side where their frame chain is. Whether one was added to `cfg`.
    fn refresh(&mut self, pids: &[u32], maps: &BpfMaps<'_>) -> bool {
        let (threads, cfg) = (maps.py_threads, maps.py_cfg);
        let mut found = false;
        if crate::runtimes::cost::off("php") {
            return found;
        }
        for &pid in pids {
            if let Some(p) = self.procs.get_mut(&pid) {
                p.ex.new_turn();
                continue;
            }
            // Looked at again after an exec (a launched command is first
            // the launcher, then PHP).
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
            if self.not_php.get(&pid) == Some(&exe) {
                continue;
            }
            if !reader::is_read(&exe) {
                self.not_php.insert(pid, exe);
                continue;
            }
            let Ok(ex) = Executor::find(pid) else {
                self.not_php.insert(pid, exe);
                continue;
            };
            let c = config(&ex.layout, ex.zts);
            if cfg.update(&pid.to_ne_bytes(), as_bytes(&c), MapFlags::ANY).is_err() {
                continue;
            }
            // An NTS build's main thread: its "thread state" is the
            // globals themselves (a ZTS build's are found per thread).
            if ex.zts.is_none() {
                let _ = threads.update(&pid.to_ne_bytes(), &ex.globals.to_ne_bytes(), MapFlags::ANY);
            }
            self.procs.insert(pid, Proc { ex, addr: HashMap::new(), names: Vec::new() });
            found = true;
        }
        found
    }

    /// Look at `pid` as it execs: a PHP found then has its frames read
    /// from its first stacks, not from the capture loop's next turn (up
    /// to 800 ms later on a loaded machine, its script running by then).
    /// Whether it was added to `cfg`.
    fn at_exec(&mut self, pid: u32, maps: &BpfMaps<'_>) -> bool {
        self.refresh(&[pid], maps)
    }

    /// The trailer's counts, where a PHP was found: frames whose function
    /// could not be read (each a `php::[unreadable frame]`).
    fn stats(&self) -> Vec<(String, u64)> {
        if self.procs.is_empty() {
            return Vec::new();
        }
        vec![("php_unreadable_frames".to_string(), self.unread)]
    }

    /// Whether `pid` was found to run a PHP read.
    fn owns(&self, pid: u32) -> bool {
        self.procs.contains_key(&pid)
    }

    /// The frames named in `pid`, for its Maps record.
    fn names(&self, pid: u32) -> Vec<NamedAddr> {
        self.procs.get(&pid).map(|p| p.names.clone()).unwrap_or_default()
    }

    /// `native` (root first) with the PHP frames of `e` put in; `in_file`
    /// says which of its frames are in a file's code (not JIT code, not
    /// the `[truncated]` marker).
    fn splice(&mut self, e: &WcEvent, native: Vec<u64>, in_file: &[bool]) -> Vec<u64> {
        let n = (e.py_n as usize).min(e.py.len());
        let Some(p) = self.procs.get_mut(&e.pid) else { return native };
        if n == 0 {
            return native;
        }
        let t0 = crate::runtimes::cost::now();
        let mut unread = 0;
        let runs = cut(&e.py[..n], |f, opline| match p.name(f, opline) {
            Ok(a) => a,
            Err(()) => {
                unread += 1;
                Some(p.mark_unread())
            }
        });
        self.unread += unread;
        let in_ex = |a: u64| p.ex.execute_ex.iter().any(|&(s, e)| a > s && a <= e);
        let exs: Vec<usize> = (0..native.len()).rev().filter(|&i| in_ex(native[i])).collect();
        let in_php = |a: u64| p.ex.mapped.iter().any(|&(s, e)| a >= s && a < e);
        let out = crate::runtimes::splice::place(&native, &exs, crate::runtimes::splice::Rest::Above(fallback(&native, in_file, in_php)), runs);
        self.cost.stack(t0);
        out
    }
}

/// Where the PHP frames go when no `execute_ex` frame ran them (opcache's
/// JIT code runs them): after the `[truncated]` marker of a stack cut
/// short (what is missing is rootward); else rootward of the outermost
/// frame in JIT code (the code that ran them); else above the innermost
/// frame of the executable; else (None) at the root.
fn fallback(native: &[u64], in_file: &[bool], in_php: impl Fn(u64) -> bool) -> Option<usize> {
    let file = |i: usize| in_file.get(i).copied().unwrap_or(true);
    if !native.is_empty() && !file(0) && native.len() > 1 && file(1) {
        // The root is no file's code: the marker (JIT code is never a root).
        return Some(0);
    }
    if let Some(k) = (1..native.len()).find(|&i| !file(i)) {
        return Some(k - 1);
    }
    (0..native.len()).rev().find(|&i| in_php(native[i]))
}

/// A frame chain (innermost first) cut into what each `execute_ex` call
/// runs, innermost run first, each named by `name` (function, opline;
/// None: an internal function, left out) and innermost first.
fn cut(frames: &[WcPyframe], mut name: impl FnMut(u64, u64) -> Option<u64>) -> Vec<Vec<u64>> {
    let mut runs: Vec<Vec<u64>> = vec![Vec::new()];
    for f in frames {
        if let Some(a) = name(f.code, f.instr) {
            runs.last_mut().unwrap().push(a);
        }
        if f.flags & reader::CALL_TOP != 0 {
            runs.push(Vec::new());
        }
    }
    runs.retain(|r| !r.is_empty());
    runs
}

impl Proc {
    /// The address that stands for function `func` at `opline`; None for
    /// an internal function; Err when it cannot be read.
    fn name(&mut self, func: u64, opline: u64) -> Result<Option<u64>, ()> {
        let f = self.ex.func(func).map_err(|_| ())?;
        if f.internal {
            return Ok(None);
        }
        let line = self.ex.line(opline);
        let func = wallclock_stream::names::check(&format!("php::{}", f.name)).into_owned();
        let file = f.file.map(|x| wallclock_stream::names::check(&x).into_owned());
        Ok(Some(self.address(func, file, line)))
    }

    fn mark_unread(&mut self) -> u64 {
        self.address(UNREAD.to_string(), None, None)
    }

    fn address(&mut self, func: String, file: Option<String>, line: Option<u32>) -> u64 {
        let key = (format!("{func}\0{}", file.as_deref().unwrap_or("")), line);
        if let Some(&a) = self.addr.get(&key) {
            return a;
        }
        let a = address_of(&key.0, line);
        self.addr.insert(key, a);
        self.names.push(NamedAddr { addr: a, frame: Frame { file, line, ..Frame::named(func) } });
        a
    }
}

/// The address that stands for a frame, from its name, file and line
/// alone (the same in every capture tool's stream, as Python's):
/// FNV-1a, 48 bits of it above [`NAMED_ADDR_BASE`].
fn address_of(key: &str, line: Option<u32>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes().chain(line.map_or(-1, i64::from).to_le_bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    NAMED_ADDR_BASE | (h & 0x000f_ffff_ffff_fff0)
}

/// Where PHP keeps its frame chain (in version `layout`; a thread-safe
/// build's per thread, `zts`), for the BPF walker.
fn config(layout: &reader::Layout, zts: Option<reader::Zts>) -> crate::event::WcPycfg {
    use reader::*;
    crate::event::WcPycfg {
        frame: layout.current_execute_data as u32,
        cframe: -1,
        code: EX_FUNC as u32,
        instr: EX_OPLINE as u32,
        flags: EX_CALL_INFO_HI as u32,
        previous: EX_PREV as u32,
        // The main thread alone, listed: no list of threads to look in.
        runtime_interp: 0,
        interp_threads: 0,
        tstate_tid: 0,
        tstate_next: 0,
        span: (EX_PREV + 8) as u32,
        tls_off: zts.map_or(0, |z| z.tpoff),
        tls_add: zts.map_or(0, |z| z.globals_offset),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reader::CALL_TOP;

    fn frames(v: &[(u64, u32)]) -> Vec<WcPyframe> {
        v.iter().map(|&(code, flags)| WcPyframe { code, instr: 0, flags, pad: 0 }).collect()
    }

    #[test]
    fn runs_end_at_frames_called_from_c_and_internal_functions_are_left_out() {
        // usleep (internal, 9) <- nap <- {main} (top); then a callback run:
        // cb (top) <- array_map (internal) <- main2 (top).
        let f = frames(&[(9, 0), (1, 0), (2, CALL_TOP), (3, CALL_TOP), (9, 0), (4, CALL_TOP)]);
        let runs = cut(&f, |c, _| (c != 9).then_some(c));
        assert_eq!(runs, vec![vec![1, 2], vec![3], vec![4]]);
    }

    #[test]
    fn runs_go_above_execute_ex_or_after_the_cut_marker() {
        use crate::runtimes::splice::{place, Rest};
        // root, execute_ex, zif_array_map, execute_ex, zif_usleep, leaf.
        let native = [10, 11, 12, 13, 14, 15];
        let runs = vec![vec![1, 2], vec![3]];
        assert_eq!(place(&native, &[3, 1], Rest::Above(None), runs.clone()), vec![10, 11, 3, 12, 13, 2, 1, 14, 15]);
        // JIT: no execute_ex; a stack cut short ([truncated] = 10).
        assert_eq!(place(&native, &[], Rest::Above(Some(0)), runs), vec![10, 3, 2, 1, 11, 12, 13, 14, 15]);
    }

    #[test]
    fn under_the_jit_php_frames_go_rootward_of_its_code() {
        let php = |a: u64| (20..30).contains(&a);
        // [truncated], JIT code, zif_usleep (php), usleep (libc).
        assert_eq!(fallback(&[1, 2, 21, 40], &[false, false, true, true], php), Some(0));
        // _start, zend_execute (php), JIT code, zif_usleep, usleep.
        assert_eq!(fallback(&[10, 22, 2, 21, 40], &[true, true, false, true, true], php), Some(1));
        // [truncated], zif_usleep, usleep: after the marker.
        assert_eq!(fallback(&[1, 21, 40], &[false, true, true], php), Some(0));
        // All in files: above the executable's innermost frame.
        assert_eq!(fallback(&[10, 22, 40], &[true, true, true], php), Some(1));
    }
}
