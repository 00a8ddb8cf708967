//! CPython's own view of its threads, read from outside the process
//! (process_vm_readv, as py-spy does): `_PyRuntime` -> interpreters ->
//! thread states (each with its kernel tid) -> the current frame ->
//! previous..., each frame named from its code object (qualified name,
//! file, line from the location table). CPython 3.9 to 3.15.
//!
//! This is what the capture needs besides the frame chain read in BPF at
//! switch-out: which thread state belongs to which tid, and the names of
//! the code objects a chain points at (read while the process lives,
//! cached by code object).
//!
//! 3.13 and later are read by the offsets they publish in the process
//! (`_Py_DebugOffsets`, offsets::from_debug); older ones by a table per
//! minor version. The interpreter may live in another root (a container,
//! a chroot): its file is opened through `/proc/PID/root`.

use std::collections::{HashMap, HashSet};

use object::{Object, ObjectSegment, ObjectSymbol};

use super::linetable::{line_of, line_of_310, line_of_39};
use super::offsets::{self, owner_is_function, Offsets, FRAME_OWNED_BY_CSTACK};

const MAX_THREADS: usize = 4096;
const MAX_FRAMES: usize = 1024;
const MAX_STR: u64 = 4096;

/// One Python frame: what the code object says, and where it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyFrame {
    pub name: String,
    pub file: String,
    pub line: Option<i64>,
}

/// One thread state: its kernel tid and its frames, innermost first.
#[derive(Debug, Clone)]
pub struct PyThread {
    pub tid: u32,
    pub tstate: u64,
    pub frames: Vec<PyFrame>,
}

type CodeInfo = ([u64; 4], String, String, i64, Vec<u8>);

/// A CPython interpreter in a live process.
pub struct Interpreter {
    pid: u32,
    runtime: u64,
    pub offsets: Offsets,
    /// Path of the file that holds the interpreter (libpython or the executable).
    pub path: String,
    /// Code object -> (its name, file and table objects and first line;
    /// name, file, first line, location table).
    code: HashMap<u64, CodeInfo>,
    /// Code objects read since the last [`Interpreter::new_turn`]: within
    /// a turn of the capture loop (20 ms) a cached one is taken as it is,
    /// not read again for each frame of each stack that shows it (that was
    /// a third of offcputime's CPU time on a Python program).
    checked: HashSet<u64>,
    /// Where `_PyEval_EvalFrameDefault` (and its `.cold` part) lies in the
    /// process: the native frames that run Python frames.
    pub eval: Vec<(u64, u64)>,
    /// The parts of it found with no symbol (a stripped file's split-off
    /// parts, see [`cold_parts`]): nothing would name a frame there.
    pub eval_unnamed: Vec<(u64, u64)>,
    /// The mappings of the interpreter's file in the process.
    pub mapped: Vec<(u64, u64)>,
    /// `PyCode_Type`: a frame read while the interpreter changes it can
    /// point at something else, which is then not taken for code.
    code_type: Option<u64>,
    /// 3.10: offset of the tid in glibc's `struct pthread`, once found.
    pthread_tid: Option<u64>,
}

/// CPython 3.N in `path` (a libpython3.N.so* or a python3.N executable).
fn minor_from_path(path: &str) -> Option<u32> {
    let name = path.rsplit('/').next()?;
    let rest = name.strip_prefix("libpython3.").or_else(|| name.strip_prefix("python3."))?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let after = &rest[digits.len()..];
    if !(after.is_empty() || after.starts_with(".so") || after.starts_with('d') || after.starts_with('m')) {
        return None;
    }
    digits.parse().ok()
}

/// The parts of the function at `hot` (its range, file addresses) that
/// the compiler split off (GCC's `.cold` parts: Debian's PGO builds of
/// 3.14 and 3.15 keep most of `_PyEval_EvalFrameDefault`'s opcodes in an
/// 84 KB one, and its 1 KB symbol only covers the hot entry), when the
/// file has no symbols for them: the unwind-table entries (FDEs) that
/// the function jumps into (`jmp`/`jcc rel32`, not calls) at least twice,
/// that begin at no symbol. Read at every byte, not decoded: the few
/// stray matches land at one place each.
fn cold_parts(obj: &object::File, hot: (u64, u64)) -> Vec<(u64, u64)> {
    use gimli::{BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, UnwindSection};
    use object::{ObjectSection, SymbolKind};
    let (Some(hdr), Some(eh)) = (obj.section_by_name(".eh_frame_hdr"), obj.section_by_name(".eh_frame")) else { return Vec::new() };
    let Some(text) = obj.sections().find(|s| s.address() <= hot.0 && hot.1 <= s.address() + s.size()) else { return Vec::new() };
    let (Ok(hdr_data), Ok(eh_data), Ok(code)) = (hdr.data(), eh.data(), text.data()) else { return Vec::new() };
    let bases = BaseAddresses::default().set_eh_frame_hdr(hdr.address()).set_eh_frame(eh.address()).set_text(text.address());
    let Ok(parsed) = EhFrameHdr::new(hdr_data, LittleEndian).parse(&bases, 8) else { return Vec::new() };
    let Some(table) = parsed.table() else { return Vec::new() };
    let eh = EhFrame::new(eh_data, LittleEndian);
    let at = |a: u64| code.get((a - text.address()) as usize..);
    let Some(body) = at(hot.0).and_then(|b| b.get(..(hot.1 - hot.0) as usize)) else { return Vec::new() };
    let mut hits: HashMap<(u64, u64), u32> = HashMap::new();
    for i in 0..body.len() {
        let (len, disp) = match body[i..] {
            [0xe9, a, b, c, d, ..] => (5, i32::from_le_bytes([a, b, c, d])),
            [0x0f, op, a, b, c, d, ..] if (0x80..=0x8f).contains(&op) => (6, i32::from_le_bytes([a, b, c, d])),
            _ => continue,
        };
        let target = (hot.0 + i as u64 + len).wrapping_add_signed(i64::from(disp));
        if (hot.0..hot.1).contains(&target) {
            continue;
        }
        if let Ok(fde) = table.fde_for_address(&eh, &bases, target, EhFrame::cie_from_offset) {
            *hits.entry((fde.initial_address(), fde.initial_address() + fde.len())).or_default() += 1;
        }
    }
    let named: HashSet<u64> = obj.dynamic_symbols().chain(obj.symbols()).filter(|s| s.kind() == SymbolKind::Text).map(|s| s.address()).collect();
    hits.into_iter().filter(|&(r, n)| n >= 2 && !named.contains(&r.0)).map(|(r, _)| r).collect()
}

impl Interpreter {
    /// Find the interpreter of `pid`: the libpython it maps, else its
    /// python3.N executable; `_PyRuntime` from that file's symbols; the
    /// version from the file's name, checked against `Py_Version` in the
    /// process where the file exports it.
    pub fn find(pid: u32) -> Result<Interpreter, String> {
        let maps = wallclock_stream::procmaps::read(pid).ok_or_else(|| format!("pid {pid}: its maps cannot be read"))?;
        let mut cands: Vec<(u64, u64, String)> = Vec::new();
        let mut ranges: Vec<(u64, u64, String)> = Vec::new();
        for m in maps.into_iter().map(|m| m.entry).filter(|m| minor_from_path(&m.path).is_some()) {
            cands.push((m.start, m.offset, m.path.clone()));
            ranges.push((m.start, m.end, m.path));
        }
        cands.sort_by_key(|c| !c.2.contains("libpython"));
        let (start, off, path) = cands.first().cloned().ok_or_else(|| format!("pid {pid}: no CPython 3 mapped"))?;
        let minor = minor_from_path(&path).unwrap_or(0);
        if !offsets::minors().contains(&minor) {
            return Err(format!("pid {pid}: CPython 3.{minor} is not read (the capture reads {})", offsets::read_said()));
        }
        // Mapped, not read whole: no thread's frames are read until this
        // returns, and reading a 30 MB libpython took up to 240 ms under
        // load, while the threads it had started ran on without them.
        // Through the process's own root first (a container's file).
        let data = crate::elf::map_file(&format!("/proc/{pid}/root{path}"))
            .or_else(|| crate::elf::map_file(&path))
            .ok_or_else(|| format!("{path}: cannot map it"))?;
        let obj = object::File::parse(&*data).map_err(|e| format!("{path}: {e}"))?;
        let segments: Vec<(u64, u64, u64)> = obj.segments().map(|s| (s.file_range().0, s.address(), s.file_range().1)).collect();
        let bias = crate::elf::load_bias(&segments, start, off).ok_or_else(|| format!("{path}: no segment holds offset {off:#x}"))?;
        // One pass over both symbol tables for every symbol needed.
        let (mut runtime, mut code_type, mut version) = (None, None, None);
        let mut eval: Vec<(u64, u64)> = Vec::new();
        for s in obj.dynamic_symbols().chain(obj.symbols()) {
            let Ok(n) = s.name_bytes() else { continue };
            let at = s.address().wrapping_add(bias);
            match n {
                b"_PyRuntime" => _ = runtime.get_or_insert(at),
                b"PyCode_Type" => _ = code_type.get_or_insert(at),
                b"Py_Version" => _ = version.get_or_insert(at),
                _ if n.starts_with(b"_PyEval_EvalFrameDefault") && matches!(n.get(24), None | Some(b'.')) => {
                    eval.push((at, at + s.size().max(1)));
                }
                _ => {}
            }
        }
        let runtime = runtime.ok_or_else(|| format!("{path}: no _PyRuntime symbol"))?;
        let offsets = Self::offsets(pid, minor, runtime)?;
        // Stripped (only .dynsym): the eval loop's parts split off by the
        // compiler have no symbol; found by the jumps into them.
        let mut eval_unnamed = Vec::new();
        if eval.len() == 1 {
            let hot = (eval[0].0 - bias, eval[0].1 - bias);
            eval_unnamed = cold_parts(&obj, hot).into_iter().map(|(s, e)| (s + bias, e + bias)).collect();
            eval.extend(&eval_unnamed);
        }
        eval.sort_unstable();
        eval.dedup();
        let mapped = ranges.into_iter().filter(|r| r.2 == path).map(|r| (r.0, r.1)).collect();
        let it = Interpreter { pid, runtime, offsets, path: path.clone(), code: HashMap::new(), checked: HashSet::new(), eval, eval_unnamed, mapped, code_type, pthread_tid: None };
        if let Some(v) = version {
            let v = it.u64(v)? as u32;
            if v >> 24 != 3 || (v >> 16) & 0xff != minor {
                return Err(format!("{path}: Py_Version {v:#x} is not 3.{minor}"));
            }
        }
        Ok(it)
    }

    /// 3.`minor`'s offsets: from its `_Py_DebugOffsets` where it has them
    /// (3.13+), else the table of its version.
    fn offsets(pid: u32, minor: u32, runtime: u64) -> Result<Offsets, String> {
        let Some(words) = offsets::debug_layout(minor).map(|l| l.words) else {
            return offsets::for_minor(minor).copied().ok_or_else(|| format!("pid {pid}: CPython 3.{minor} is not read (the capture reads {})", offsets::read_said()));
        };
        let mut table = vec![0u8; words * 8];
        crate::procmem::Mem { pid }.read(runtime, &mut table)?;
        offsets::from_debug(minor, &table).map_err(|e| format!("pid {pid}: {e}"))
    }

    /// The start of `_PyRuntime` as long as its `_Py_DebugOffsets` (3.13+).
    pub fn debug_table(&self) -> Option<Vec<u8>> {
        let words = offsets::debug_layout(self.offsets.minor)?.words;
        let mut table = vec![0u8; words * 8];
        self.read(self.runtime, &mut table).ok()?;
        Some(table)
    }

    pub(crate) fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), String> {
        crate::procmem::Mem { pid: self.pid }.read(addr, buf)
    }

    /// Whether the process has exited (its memory is gone).
    fn gone(&self) -> bool {
        crate::procmem::Mem { pid: self.pid }.gone()
    }

    pub(crate) fn u64(&self, addr: u64) -> Result<u64, String> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    pub(crate) fn u8(&self, addr: u64) -> Result<u8, String> {
        let mut b = [0u8; 1];
        self.read(addr, &mut b)?;
        Ok(b[0])
    }

    /// A `str` object: compact ASCII or one-byte (Latin-1) strings, the
    /// others as `?` per character. What a str object cannot hold is an
    /// error, not a name: a compact str's characters end with a NUL, an
    /// ASCII one's are below 0x80, and the names read hold no NUL. A str
    /// freed or changed as it was read (a module's code replaced while
    /// it imports: `<module>` then 4 KB of the heap, in a fresh-clone
    /// run) fails one of these; its frame is then left out, its caller's
    /// kept.
    pub(crate) fn string(&self, obj: u64) -> Result<String, String> {
        let o = self.offsets;
        let bad = || format!("pid {}: str at {obj:#x} is not one (freed or changing)", self.pid);
        let len = self.u64(obj + 16)?;
        let state = self.u8(obj + 32)?;
        let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1 == 1, (state >> 6) & 1 == 1);
        if !compact || !matches!(kind, 1 | 2 | 4) {
            return Err(format!("pid {}: str at {obj:#x} is not compact", self.pid));
        }
        if len > MAX_STR {
            return Err(bad());
        }
        let at = obj + if ascii { o.ascii_size } else { o.compact_size };
        // The characters and the NUL after them.
        let mut b = vec![0u8; ((len + 1) * u64::from(kind)) as usize];
        self.read(at, &mut b)?;
        let (chars, end) = b.split_at(len as usize * kind as usize);
        let nul_inside = chars.chunks(kind as usize).any(|c| c.iter().all(|&x| x == 0));
        if end.iter().any(|&x| x != 0) || nul_inside || ascii && chars.iter().any(|&c| c >= 0x80) {
            return Err(bad());
        }
        Ok(match kind {
            1 => chars.iter().map(|&c| char::from(c)).collect(),
            _ => chars.chunks(kind as usize).map(|_| '?').collect(),
        })
    }

    /// A `bytes` object's contents.
    fn bytes(&self, obj: u64) -> Result<Vec<u8>, String> {
        let len = self.u64(obj + 16)?.min(1 << 20);
        let mut b = vec![0u8; len as usize];
        self.read(obj + 32, &mut b)?;
        Ok(b)
    }

    /// Name, file, first line and location table of a code object, cached
    /// by address and by what identifies it: a code object freed and
    /// another made at its address (seen: a `<module>` run by exec at
    /// startup, then a function's) has other name, file and table objects.
    pub fn code(&mut self, code: u64) -> Result<(String, String, i64, &[u8]), String> {
        if !(self.checked.contains(&code) && self.code.contains_key(&code)) {
            match self.read_code(code) {
                Ok(()) => {}
                // Stacks taken before the process exited are named after
                // it (a loaded machine's capture lags seconds behind):
                // nothing can have replaced a code object read before.
                Err(_) if self.code.contains_key(&code) && self.gone() => {}
                Err(e) => return Err(e),
            }
            self.checked.insert(code);
        }
        let (_, n, f, l, t) = &self.code[&code];
        Ok((n.clone(), f.clone(), *l, t))
    }

    /// Read code object `code` into the cache, unless the cached one has
    /// the same name, file and table objects and first line.
    fn read_code(&mut self, code: u64) -> Result<(), String> {
        let o = self.offsets;
        let mut head = vec![0u8; (o.code_linetable.max(o.code_qualname).max(o.code_filename) + 8) as usize];
        self.read(code, &mut head)?;
        let word = |at: u64| u64::from_le_bytes(head[at as usize..at as usize + 8].try_into().unwrap());
        if self.code_type.is_some_and(|t| word(8) != t) {
            return Err(format!("pid {}: {code:#x} is not a code object", self.pid));
        }
        let first = i64::from(i32::from_le_bytes(head[o.code_firstlineno as usize..][..4].try_into().unwrap()));
        let id = [word(o.code_qualname), word(o.code_filename), word(o.code_linetable), first as u64];
        if self.code.get(&code).is_none_or(|c| c.0 != id) {
            let name = self.string(id[0])?;
            let file = self.string(id[1])?;
            let table = self.bytes(id[2])?;
            self.code.insert(code, (id, name, file, first, table));
        }
        Ok(())
    }

    /// A new turn of the capture loop: code objects are checked again
    /// (one freed since and another made at its address is read anew).
    pub fn new_turn(&mut self) {
        self.checked.clear();
    }

    /// (kernel tid, thread state) of every thread of the main interpreter
    /// that has started: what the capture's BPF side walks from. A tid
    /// claimed twice (3.10: a new thread's state carries its parent's
    /// pthread until the thread runs) stays with the older state.
    pub fn thread_states(&mut self) -> Result<Vec<(u32, u64)>, String> {
        let o = self.offsets;
        let interp = self.u64(self.runtime + o.runtime_interpreters_head)?;
        let mut ts = self.u64(interp + o.interp_threads_head)?;
        let mut all = Vec::new();
        while ts != 0 && all.len() < MAX_THREADS {
            all.push((self.u64(ts + o.tstate_native_thread_id)?, ts));
            ts = self.u64(ts + o.tstate_next)?;
        }
        if o.tstate_is_pthread {
            // The oldest state is the main thread's, whose tid is the pid.
            let at = match self.pthread_tid {
                Some(at) => at,
                None => {
                    let &(main, _) = all.last().ok_or_else(|| format!("pid {}: no thread state", self.pid))?;
                    let at = self.find_pthread_tid(main)?;
                    self.pthread_tid = Some(at);
                    at
                }
            };
            for t in &mut all {
                let mut b = [0u8; 4];
                t.0 = if t.0 == 0 || self.read(t.0 + at, &mut b).is_err() { 0 } else { u64::from(u32::from_le_bytes(b)) };
            }
        }
        let mut out: Vec<(u32, u64)> = Vec::new();
        // A thread state made by Thread.start() before its thread runs
        // has no native id yet, and nothing to read.
        for &(tid, ts) in all.iter().rev() {
            let tid = tid as u32;
            if tid != 0 && !out.iter().any(|t| t.0 == tid) {
                out.push((tid, ts));
            }
        }
        out.reverse();
        Ok(out)
    }

    /// Where glibc's `struct pthread` keeps the kernel tid: the first
    /// 4-byte field of the main thread's that holds the pid.
    fn find_pthread_tid(&self, main: u64) -> Result<u64, String> {
        let mut b = vec![0u8; 2048];
        self.read(main, &mut b)?;
        (16..b.len() - 4)
            .step_by(4)
            .find(|&i| u32::from_le_bytes(b[i..i + 4].try_into().unwrap()) == self.pid)
            .map(|i| i as u64)
            .ok_or_else(|| format!("pid {}: no tid in the main thread's pthread", self.pid))
    }

    /// The process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Where `_PyRuntime` is in the process.
    pub fn runtime(&self) -> u64 {
        self.runtime
    }

    /// Every thread state of the main interpreter whose thread has started.
    pub fn threads(&mut self) -> Result<Vec<PyThread>, String> {
        let mut out = Vec::new();
        for (tid, tstate) in self.thread_states()? {
            let frames = self.frames(tstate)?;
            out.push(PyThread { tid, tstate, frames });
        }
        Ok(out)
    }

    /// Name, file and line of code object `code` at `instr` (a frame's
    /// instruction pointer; 3.9, 3.10: `f_lasti` in its low half, the
    /// byte offset of the instruction in 3.9, its index in 3.10).
    pub fn frame_at(&mut self, code: u64, instr: u64) -> Result<PyFrame, String> {
        let o = self.offsets;
        let code = o.code_ptr(code);
        let (name, file, first, table) = self.code(code)?;
        // f_lasti is -1 before the first instruction.
        let lasti = u64::try_from(instr as u32 as i32).ok();
        let line = match o.minor {
            9 => lasti.and_then(|at| line_of_39(table, first, at)),
            10 => lasti.and_then(|i| line_of_310(table, first, i * 2)),
            _ => {
                let unit = instr.checked_sub(code + o.code_adaptive).map(|d| d / 2);
                unit.and_then(|u| line_of(table, first, u))
            }
        };
        Ok(PyFrame { name, file, line })
    }

    /// The Python frames of a thread state, innermost first.
    pub fn frames(&mut self, tstate: u64) -> Result<Vec<PyFrame>, String> {
        Ok(self.runs(tstate)?.into_iter().flatten().collect())
    }

    /// The Python frames of a thread state cut into the runs that one
    /// `_PyEval_EvalFrameDefault` call executes, innermost run first, each
    /// innermost first: what a reader that places them among the native
    /// frames itself needs (wcdump; the capture cuts the chain read in BPF,
    /// `frames::cut`, the same way).
    pub fn runs(&mut self, tstate: u64) -> Result<Vec<Vec<PyFrame>>, String> {
        let o = self.offsets;
        let mut f = self.u64(tstate + o.tstate_frame)?;
        if let (Some(c), true) = (o.cframe_current, f != 0) {
            f = self.u64(f + c)?;
        }
        let mut runs: Vec<Vec<PyFrame>> = vec![Vec::new()];
        let mut n = 0;
        while f != 0 && n < MAX_FRAMES {
            n += 1;
            let owner = self.u8(f + o.frame_owner)?;
            if o.minor >= 12 && !owner_is_function(owner) {
                // The entry frame of an eval call ends a run; 3.14's
                // other frames of the C stack are skipped.
                if owner == FRAME_OWNED_BY_CSTACK {
                    runs.push(Vec::new());
                }
            } else {
                let code = self.u64(f + o.frame_code)?;
                let instr = self.u64(f + o.frame_instr)?;
                runs.last_mut().unwrap().push(self.frame_at(code, instr)?);
                // 3.9 and 3.10 run each Python frame in a C call of its own.
                let entry = match o.frame_is_entry {
                    Some(e) => self.u8(f + e)? != 0,
                    None => o.frame_objects(),
                };
                if entry {
                    runs.push(Vec::new());
                }
            }
            f = self.u64(f + o.frame_previous)?;
        }
        runs.retain(|r| !r.is_empty());
        Ok(runs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workload of tests/python.rs, run by `python`, read from
    /// outside while it runs: the sleeping thread and the one waiting
    /// for a lock, with their callers, files and lines.
    fn reads_a_live_interpreter(python: &str) {
        // SAFETY: geteuid has no preconditions.
        if !std::path::Path::new(python).exists() || unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: {python} missing, or not root");
            return;
        }
        reads_a_live_interpreter_in(python, None);
    }

    /// The same, with `python` run by `scripts/chroot run SUITE` inside
    /// the chroot that scripts/setup --tests makes (target/chroot-SUITE),
    /// read from outside by its host pid.
    fn reads_a_chroots(suite: &str, python: &str) {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let chroot = format!("{root}/target/chroot-{suite}");
        // SAFETY: geteuid has no preconditions.
        if !std::path::Path::new(&format!("{chroot}/usr/bin/{python}")).exists() || unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: no {chroot}/usr/bin/{python} (scripts/setup --tests makes it), or not root");
            return;
        }
        reads_a_live_interpreter_in(python, Some((suite, &chroot)));
    }

    fn reads_a_live_interpreter_in(python: &str, chroot: Option<(&str, &str)>) {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let script = format!("{root}/tests/programs/python/workload.py");
        let src = std::fs::read_to_string(&script).unwrap();
        let line = |text: &str| src.lines().position(|l| l.trim() == text).unwrap() as i64 + 1;
        // One directory per interpreter: the tests run side by side, and one
        // removing a shared directory made the other's workload fail
        // (its threads then vanished while being read).
        let tag: String = python.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let name = format!("wc-pyreader-{}-{tag}", std::process::id());
        // Inside a chroot: the workload copied into its /tmp, named by
        // its path there.
        let (dir, inside) = match chroot {
            Some((_, at)) => (std::path::PathBuf::from(format!("{at}/tmp/{name}")), std::path::PathBuf::from(format!("/tmp/{name}"))),
            None => (std::env::temp_dir().join(&name), std::env::temp_dir().join(&name)),
        };
        std::fs::create_dir_all(&dir).unwrap();
        let mut cmd = match chroot {
            Some((suite, _)) => {
                std::fs::copy(&script, dir.join("workload.py")).unwrap();
                let mut c = std::process::Command::new(format!("{root}/scripts/chroot"));
                c.args(["run", suite, python]).arg(inside.join("workload.py"));
                c
            }
            None => {
                let mut c = std::process::Command::new(python);
                c.arg(&script);
                c
            }
        };
        let mut child = cmd.arg("1.5").arg(inside.join("truth.jsonl")).spawn().unwrap();
        let pid = child.id();
        let mut seen = (false, false);
        for _ in 0..200 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            let Ok(mut it) = Interpreter::find(pid) else { continue };
            // Forky's stripped interpreters: the eval loop's split-off
            // part found (most of its code).
            let eval: u64 = it.eval.iter().map(|(s, e)| e - s).sum();
            assert!(chroot.is_none() || eval > 16384, "{python}: eval loop of {eval} bytes: {:x?}", it.eval);
            let Ok(threads) = it.threads() else { continue };
            for t in threads {
                assert!(std::path::Path::new(&format!("/proc/{pid}/task/{}", t.tid)).exists(), "tid {}", t.tid);
                let names: Vec<&str> = t.frames.iter().map(|f| f.name.as_str()).collect();
                let top = |leaf: &str, caller: &str| names.len() > 3 && names[..3] == [leaf, "measured", caller];
                if top("nap", "run_sleep") && t.frames[0].line == Some(line("time.sleep(0.002)")) {
                    assert!(t.frames[0].file.ends_with("workload.py"), "{:?}", t.frames[0]);
                    // Its threading name (the workload names each thread
                    // after its function).
                    assert_eq!(it.thread_name(t.tstate).as_deref(), Some("run_sleep"), "{python}");
                    // 3.9 and 3.10 have no qualified names (co_qualname came in 3.11).
                    let root = if it.offsets.frame_objects() { "_bootstrap" } else { "Thread._bootstrap" };
                    assert_eq!(names.last(), Some(&root), "{names:?}");
                    seen.0 = true;
                }
                if top("wait_lock", "run_wait") && t.frames[0].line == Some(line("lock.acquire()")) {
                    assert_eq!(it.thread_name(t.tstate).as_deref(), Some("run_wait"), "{python}");
                    seen.1 = true;
                }
            }
            if seen == (true, true) {
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(seen, (true, true), "{python}: the nap and wait_lock threads were (not) seen");
    }

    #[test]
    fn reads_debians_311() {
        reads_a_live_interpreter("/usr/bin/python3.11");
    }

    #[test]
    fn reads_pyenvs_39_to_313() {
        for v in ["3.9.18/bin/python3.9", "3.10.13/bin/python3.10", "3.11.7/bin/python3.11", "3.12.1/bin/python3.12", "3.13.0/bin/python3.13"] {
            reads_a_live_interpreter(&format!("/root/.pyenv/versions/{v}"));
        }
    }

    /// Debian forky's 3.14 and 3.15 in a chroot, by the offsets each
    /// publishes (`_Py_DebugOffsets`).
    #[test]
    fn reads_forkys_314_and_315() {
        for python in ["python3.14", "python3.15"] {
            reads_a_chroots("forky", python);
        }
    }

    /// What 3.13.0 publishes is the table read from its DWARF.
    #[test]
    fn pyenvs_313_publishes_its_table() {
        let python = "/root/.pyenv/versions/3.13.0/bin/python3.13";
        // SAFETY: geteuid has no preconditions.
        if !std::path::Path::new(python).exists() || unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: {python} missing, or not root");
            return;
        }
        let mut child = std::process::Command::new(python).args(["-c", "import time; time.sleep(30)"]).spawn().unwrap();
        let mut found = None;
        for _ in 0..200 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            if let Ok(it) = Interpreter::find(child.id()) {
                found = Some(it.offsets);
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found, Some(offsets::PY313));
    }

    #[test]
    fn versions_from_file_names() {
        assert_eq!(minor_from_path("/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0"), Some(12));
        assert_eq!(minor_from_path("/usr/bin/python3.11"), Some(11));
        assert_eq!(minor_from_path("/usr/lib/x86_64-linux-gnu/libpython3.13d.so.1.0"), Some(13));
        assert_eq!(minor_from_path("/usr/bin/python3.11-config"), None);
        assert_eq!(minor_from_path("/usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so"), None);
    }
}
