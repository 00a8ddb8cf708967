//! Node.js (V8) JavaScript frames named with no flag: V8 keeps frame
//! pointers, so its stacks unwind whole, and each JavaScript frame holds
//! its JSFunction in a fixed slot (`v8dbg_off_fp_function`). Where a
//! stack is taken, the frames in JIT code (anonymous memory) and those
//! of the interpreter's entry trampoline (interpreted functions) are
//! named from the live process's heap (heap.rs), with the layout node
//! exports for debuggers (meta.rs): `JS:*hashLoop /app/work.js:9:18`,
//! the very name `--perf-basic-prof` writes in V8's perf map (`*`
//! optimized, `^` baseline, `~` interpreted), so both sources agree.
//!
//! Cached by SharedFunctionInfo and checked again once per turn (20 ms
//! of the stacks' clock): a GC may move a function or put another at its
//! address; its words (map, name-or-ScopeInfo, script) then differ and
//! it is read again. A frame whose function cannot be read (freed, moved,
//! a prologue not yet done) keeps its address: stacksym names it from a
//! perf map if there is one, else it stays `[unknown]`; it is counted.
//! Stacks unwound after the process exited (the capture lags behind on a
//! loaded machine) take what was read last while it lived.

pub mod heap;
pub mod meta;
mod memo;
mod prefetch;

use std::collections::{HashMap, HashSet};

use wallclock_stream::{Frame, NamedAddr, NAMED_ADDR_BASE};

use crate::runtimes::{Runtime, Unwound, MIN_CODE_ADDR};
use heap::{Func, Heap, Script};
use meta::Meta;

/// Nanoseconds of the stacks' clock a cached object is trusted for.
const TURN_NS: u64 = 20_000_000;
/// A process found not to run a readable V8 is looked at again after.
const RETRY_NS: u64 = 1_000_000_000;
/// `Proc::sites`: a return address of the interpreter's.
const SITE_JS: u8 = u8::MAX;
/// `Proc::sites`: frames at a return address that were not interpreted
/// ones before it is no longer probed.
const SITE_NOES: u8 = 8;

struct Proc {
    heap: Heap,
    /// The file with the metadata (as the process's maps name it).
    path: String,
    /// `Builtins_InterpreterEntryTrampoline*` as offsets in that file: V8
    /// may map the file's builtins a second time, into its code range
    /// (short builtin calls), after the process was first seen, so a
    /// frame is placed by its mapping's file offset, not its address.
    trampolines: Vec<(u64, u64)>,
    /// No trampoline symbol (Debian's libnode exports the metadata, not
    /// the builtins' names): a frame in the file's code is an interpreted
    /// one when its slots hold a JSFunction and a BytecodeArray.
    probe: bool,
    /// Where `probe` holds: the file offsets of the return addresses
    /// probed, and what was found: [`SITE_JS`] once a frame there was an
    /// interpreted one (a return address is one of the interpreter's or
    /// never), else how many frames there were not. A site is given up
    /// after [`SITE_NOES`] of those, not at the first, as Debian's libnode
    /// has some twenty C++ frames a stack: in a node attached as it
    /// started, the interpreter's return address once failed its first
    /// probe, and every interpreted frame of the capture stayed
    /// `libnode.so.137+0x99a654` (1 run in 6 of tests/runtime_node_versions.rs's
    /// forky node 24 beside two CPU hogs).
    sites: HashMap<u64, u8>,
    turn: u64,
    /// Per turn: object -> instance type; map -> the instance type it
    /// gives; JSFunction -> its SFI.
    types: HashMap<u64, Option<u16>>,
    map_types: HashMap<u64, Option<u16>>,
    fn_sfi: HashMap<u64, Option<u64>>,
    /// JSFunction -> its SFI when last read: once the process is gone
    /// (its last stacks are unwound after it exited, on a loaded
    /// machine), what was read last stands.
    fn_last: HashMap<u64, u64>,
    /// The bytecode-array slot words found to hold a BytecodeArray (a
    /// baseline frame's), for the same reason: a `^` frame unwound after
    /// the process exited stays `^`, not `*`.
    bytecode_last: HashSet<u64>,
    sfi_checked: HashSet<u64>,
    script_checked: HashSet<u64>,
    /// SFI -> its words and what they describe.
    sfis: HashMap<u64, ([u64; 3], Option<Func>)>,
    /// Script -> its name and source words and what it says.
    scripts: HashMap<u64, ([u64; 2], Option<Script>)>,
    addr: HashMap<String, u64>,
    /// The last stack named, for the next (memo.rs).
    memo: memo::Memo,
    /// (SFI, tier marker) -> its named address, while the SFIs and
    /// Scripts read say the same (emptied when one says otherwise).
    named: HashMap<(u64, u8), u64>,
    names: Vec<NamedAddr>,
}

/// Where a frame that may be a JavaScript one is: JIT code, the
/// interpreter's entry trampoline, or the file's code where the
/// trampoline has no symbol (at that file offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Jit,
    Trampoline,
    Probe(u64),
}

/// Frames named, and frames that looked like JavaScript but were not.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub named: u64,
    pub unread: u64,
}

#[derive(Default)]
pub struct V8 {
    procs: HashMap<u32, Proc>,
    /// Processes with no readable V8, when that was found, and why.
    not_v8: HashMap<u32, (u64, Option<String>)>,
    /// Metadata per node file.
    metas: HashMap<String, Result<Meta, String>>,
    pub counts: Counts,
    /// Time naming frames, and the stacks named (readcost).
    pub cost: crate::runtimes::cost::Cost,
}

pub(crate) fn is_node_file(path: &str) -> bool {
    let b = path.rsplit('/').next().unwrap_or("");
    b == "node" || b == "nodejs" || b.starts_with("libnode.so")
}

impl V8 {
    /// The V8 of `pid`, read at the first stack that needs it.
    fn proc(&mut self, pid: u32, ts: u64) -> Option<&mut Proc> {
        if !self.procs.contains_key(&pid) {
            if self.not_v8.get(&pid).is_some_and(|&(t, _)| ts.saturating_sub(t) < RETRY_NS) {
                return None;
            }
            match self.find(pid) {
                Ok(p) => {
                    self.procs.insert(pid, p);
                }
                Err(why) => {
                    if let Some(w) = &why {
                        if self.not_v8.get(&pid).is_none_or(|(_, old)| old.as_ref() != Some(w)) {
                            let tool = std::env::args().next().unwrap_or_default();
                            let tool = tool.rsplit('/').next().unwrap_or("capture");
                            let how = match crate::runtimes::perf_map(pid) {
                                Some(map) => format!("named from its perf map ({map})"),
                                None => "start node with --perf-basic-prof to name them".into(),
                            };
                            eprintln!("{tool}: warning: pid {pid} (node/V8): {w}: its JavaScript frames are not read from its heap (the capture reads Node 20-24's V8, without pointer compression); {how}");
                        }
                    }
                    self.not_v8.insert(pid, (ts, why));
                    return None;
                }
            }
        }
        self.procs.get_mut(&pid)
    }

    /// Err(None): not a node process; Err(Some(why)): node, unreadable.
    /// The metadata is in the executable of a static build (node's
    /// official ones), in libnode of a shared one (Debian's): the first
    /// of the process's node files that has it.
    fn find(&mut self, pid: u32) -> Result<Proc, Option<String>> {
        let maps = wallclock_stream::procmaps::read(pid).ok_or(None)?;
        let mut paths: Vec<&str> = Vec::new();
        for m in maps.iter().filter(|m| is_node_file(&m.entry.path)) {
            if !paths.contains(&m.entry.path.as_str()) {
                paths.push(&m.entry.path);
            }
        }
        let mut why = None;
        let mut found = None;
        for path in &paths {
            // Through the process's root (a chroot or container), else
            // the path as it is; cached per file (device and inode).
            let file = [format!("/proc/{pid}/root{path}"), path.to_string()].into_iter().find(|f| std::fs::metadata(f).is_ok());
            let Some(file) = file else {
                why.get_or_insert(format!("{path} cannot be read"));
                continue;
            };
            let key = std::fs::metadata(&file).map(|st| {
                use std::os::unix::fs::MetadataExt;
                format!("{}:{}", st.dev(), st.ino())
            });
            let key = key.unwrap_or_else(|_| file.clone());
            let meta = self
                .metas
                .entry(key)
                .or_insert_with(|| {
                    let data = crate::elf::map_file(&file).ok_or(format!("{path} cannot be read"))?;
                    Meta::parse(&data).map_err(|e| format!("{path}: {e}"))
                })
                .clone();
            match meta {
                Ok(m) => {
                    found = Some((path.to_string(), file, m));
                    break;
                }
                // A file with no metadata at all (a shared build's
                // executable) does not hide the reason another gives.
                Err(e) if e.ends_with("(v8dbg_* symbols)") => {
                    why.get_or_insert(e);
                }
                Err(e) => why = Some(e),
            }
        }
        let Some((path, file, meta)) = found else {
            return Err(why.or_else(|| (!paths.is_empty()).then(|| "no V8 postmortem metadata".to_string())));
        };
        let data = crate::elf::map_file(&file).ok_or(None)?;
        let segments = segments(&data);
        let at = |v: u64| segments.iter().find(|&&(_, a, n)| v >= a && v < a + n).map(|&(o, a, _)| o + (v - a));
        let trampolines: Vec<(u64, u64)> = meta.trampolines.iter().filter_map(|&(s, e)| Some((at(s)?, at(s)? + (e - s)))).collect();
        let probe = trampolines.is_empty();
        Ok(Proc {
            heap: Heap { pid, m: meta, gone: Default::default() },
            path,
            trampolines,
            probe,
            sites: HashMap::new(),
            turn: 0,
            types: HashMap::new(),
            map_types: HashMap::new(),
            fn_sfi: HashMap::new(),
            fn_last: HashMap::new(),
            bytecode_last: HashSet::new(),
            sfi_checked: HashSet::new(),
            script_checked: HashSet::new(),
            sfis: HashMap::new(),
            scripts: HashMap::new(),
            addr: HashMap::new(),
            named: HashMap::new(),
            memo: memo::Memo::default(),
            names: Vec::new(),
        })
    }

}

impl Runtime for V8 {
    fn name(&self) -> &'static str {
        "v8"
    }

    fn cost(&self) -> crate::runtimes::cost::Cost {
        self.cost
    }

    /// Name the JavaScript frames of the stack (`fps`: the frame pointer
    /// of each frame, 0 where unknown): each frame in code outside every
    /// file (`anon`) or in the interpreter's trampoline whose function
    /// slot holds a JSFunction becomes that function's named address.
    /// Whether the process maps a node file is asked only of a stack with
    /// no JIT code (an interpreted program's first stacks, its sleeps,
    /// have none, and must not wait for one to be read).
    fn name_frames(&mut self, s: &mut Unwound<'_>) {
        let Unwound { pid, ts, ref mut native, fps, copy, maps, .. } = *s;
        let anon = |a: u64| a > MIN_CODE_ADDR && !maps.iter().any(|m| a >= m.start && a < m.end);
        let in_file = |a: u64| maps.iter().find(|m| a >= m.start && a < m.end).map(|m| (m.path.as_str(), m.offset + (a - m.start)));
        let maps_node = || maps.iter().any(|m| is_node_file(&m.path));
        let (sp, stack) = copy;
        if crate::runtimes::cost::off("v8") || fps.len() != native.len() || !native.iter().any(|&a| anon(a)) && !maps_node() {
            return;
        }
        let mut counts = self.counts;
        let Some(p) = self.proc(pid, ts) else { return };
        // Per stack: reading the node binary's metadata, once, is not.
        let t0 = crate::runtimes::cost::now();
        p.new_turn(ts / TURN_NS);
        let from_stack = |a: u64| -> Option<u64> {
            let off = usize::try_from(a.checked_sub(sp)?).ok()?;
            Some(u64::from_le_bytes(stack.get(off..off + 8)?.try_into().ok()?))
        };
        let (off_f, off_b) = (p.heap.m.off_fp_function, p.heap.m.off_fp_bytecode_array);
        let slot = |p: &Proc, fp: u64, off: i64| fp.checked_add_signed(off).and_then(|s| from_stack(s).or_else(|| p.heap.word(s)));
        let at = |fp: u64, off: i64| fp.checked_add_signed(off).and_then(from_stack).unwrap_or(0);
        // Each frame as the stack shows it, and how much of it, from the
        // root, is the last stack's (memo.rs).
        let keys: Vec<memo::Key> = (0..native.len()).map(|i| (native[i], fps[i], at(fps[i], off_f), at(fps[i], off_b))).collect();
        let group = ts / (memo::TURNS * TURN_NS);
        let same = p.memo.same(group, &keys, anon);
        let mut out = vec![memo::SKIPPED; native.len()];
        let last = native.len().saturating_sub(1);
        // The frames that may be JavaScript ones: (index, where).
        let mut frames = Vec::new();
        for i in 0..native.len() {
            let (a, fp) = (native[i], fps[i]);
            if i < same {
                out[i] = p.memo.out[i];
                continue;
            }
            if fp == 0 || a >= NAMED_ADDR_BASE {
                continue;
            }
            // A return address points past its call: look it up before.
            let lookup = if i == last { a } else { a - 1 };
            let kind = if anon(a) {
                Kind::Jit
            } else {
                let Some(off) = in_file(lookup).filter(|&(path, _)| path == p.path).map(|(_, off)| off) else { continue };
                if p.trampolines.iter().any(|&(s, e)| off >= s && off < e) {
                    Kind::Trampoline
                } else if p.probe && p.sites.get(&off).is_none_or(|&n| n == SITE_JS || n < SITE_NOES) {
                    Kind::Probe(off)
                } else {
                    continue;
                }
            };
            frames.push((i, kind));
        }
        // What they need of the heap this turn, read at once (prefetch.rs).
        let fs: Vec<u64> = frames.iter().map(|&(i, _)| keys[i].2).collect();
        let bs: Vec<u64> = frames.iter().filter(|(_, k)| *k != Kind::Trampoline).map(|&(i, _)| keys[i].3).collect();
        p.prefetch(&fs, &bs);
        for (i, kind) in frames {
            out[i] = p.frame(kind, |p, off| slot(p, fps[i], off));
        }
        for (i, &o) in out.iter().enumerate() {
            match o {
                memo::SKIPPED => {}
                memo::UNREAD => counts.unread += 1,
                n => {
                    native[i] = n;
                    counts.named += 1;
                }
            }
        }
        p.memo = memo::Memo { group, keys, out };
        self.counts = counts;
        self.cost.stack(t0);
    }

    /// The frames named in `pid`, for its Maps record.
    fn names(&self, pid: u32) -> Vec<NamedAddr> {
        self.procs.get(&pid).map(|p| p.names.clone()).unwrap_or_default()
    }
}

/// (p_offset, p_vaddr, p_filesz) of each segment of an ELF file.
fn segments(data: &[u8]) -> Vec<(u64, u64, u64)> {
    use object::{Object, ObjectSegment};
    let Ok(obj) = object::File::parse(data) else { return Vec::new() };
    obj.segments()
        .map(|s| {
            let (off, size) = s.file_range();
            (off, s.address(), size)
        })
        .collect()
}

impl Proc {
    /// What frame `kind` is named (its slots read by `slot`): its named
    /// address, else [`memo::UNREAD`] (a function not read) or
    /// [`memo::SKIPPED`] (no JavaScript frame).
    fn frame(&mut self, kind: Kind, slot: impl Fn(&Proc, i64) -> Option<u64>) -> u64 {
        let (off_f, off_b) = (self.heap.m.off_fp_function, self.heap.m.off_fp_bytecode_array);
        let Some(f) = slot(self, off_f) else { return memo::SKIPPED };
        // A frame of the file's code (no trampoline symbol) is an
        // interpreted one only if it holds a BytecodeArray and a
        // JSFunction where V8 puts them; a C++ frame is left alone.
        if let Kind::Probe(off) = kind {
            let yes = slot(self, off_b).is_some_and(|b| self.holds_bytecode(b)) && self.sfi_of(f).is_some();
            if !self.heap.gone.get() {
                let n = self.sites.entry(off).or_insert(0);
                *n = if yes || *n == SITE_JS { SITE_JS } else { n.saturating_add(1) };
            }
            if !yes {
                return memo::SKIPPED;
            }
        }
        let marker = match kind {
            Kind::Trampoline | Kind::Probe(_) => "~",
            Kind::Jit if slot(self, off_b).is_some_and(|b| self.holds_bytecode(b)) => "^",
            Kind::Jit => "*",
        };
        self.name(f, marker).unwrap_or(memo::UNREAD)
    }

    fn new_turn(&mut self, turn: u64) {
        if turn != self.turn {
            self.turn = turn;
            self.types.clear();
            self.map_types.clear();
            self.fn_sfi.clear();
            self.sfi_checked.clear();
            self.script_checked.clear();
        }
    }

    fn type_of(&mut self, o: u64) -> Option<u16> {
        if let Some(&t) = self.types.get(&o) {
            return t;
        }
        let t = self.heap.type_of(o);
        self.types.insert(o, t);
        t
    }

    /// Whether `b`, a compiled frame's bytecode-array slot, holds a
    /// BytecodeArray (a baseline frame's; an optimized frame has a spill
    /// slot there). Once the process is gone, what was read while it lived.
    fn holds_bytecode(&mut self, b: u64) -> bool {
        if !self.heap.gone.get() {
            let t = self.type_of(b);
            if !self.heap.gone.get() {
                let yes = t == Some(self.heap.m.type_bytecode_array);
                if yes {
                    self.bytecode_last.insert(b);
                }
                return yes;
            }
        }
        self.bytecode_last.contains(&b)
    }

    /// The SharedFunctionInfo of what may be a JSFunction.
    fn sfi_of(&mut self, f: u64) -> Option<u64> {
        if let Some(&s) = self.fn_sfi.get(&f) {
            return s;
        }
        if self.heap.gone.get() {
            return self.fn_last.get(&f).copied();
        }
        let s = self.heap.js_function(f).and_then(|(map, sfi)| {
            let (first, last) = self.heap.m.js_function_types;
            let t = match self.map_types.get(&map) {
                Some(&t) => t,
                None => {
                    let t = self.heap.map_type(map);
                    self.map_types.insert(map, t);
                    t
                }
            }?;
            (first..=last).contains(&t).then_some(sfi)
        });
        if self.heap.gone.get() {
            return self.fn_last.get(&f).copied();
        }
        self.fn_sfi.insert(f, s);
        if let Some(sfi) = s {
            self.fn_last.insert(f, sfi);
        }
        s
    }

    fn func(&mut self, sfi: u64) -> Option<&Func> {
        if !self.sfi_checked.contains(&sfi) && !self.heap.gone.get() {
            let Some(words) = self.heap.sfi_words(sfi) else {
                return self.sfis.get(&sfi).filter(|_| self.heap.gone.get())?.1.as_ref();
            };
            self.check_sfi(sfi, words);
        }
        self.sfis.get(&sfi)?.1.as_ref()
    }

    /// SFI `sfi` read this turn: its words, as read now.
    ///
    /// What could not be read now is not kept: a read that failed is no
    /// answer, and words that stay the same would keep it for the life
    /// of the process (every frame of one script named without its file,
    /// in one run of a Node 24 attached as it started).
    fn check_sfi(&mut self, sfi: u64, words: [u64; 3]) {
        if self.sfis.get(&sfi).is_none_or(|(w, f)| *w != words || f.is_none()) {
            let f = self.heap.func(words);
            let was = if f.is_some() || self.heap.gone.get() { self.sfis.insert(sfi, (words, f)) } else { self.sfis.remove(&sfi) };
            if was.is_some() || self.sfis.contains_key(&sfi) {
                self.named.clear();
            }
        }
        self.sfi_checked.insert(sfi);
    }

    /// Script `sc` read this turn: its name and source words, as read
    /// now; kept only when read, as with a SharedFunctionInfo.
    fn check_script(&mut self, sc: u64, words: [u64; 2]) {
        if self.scripts.get(&sc).is_none_or(|(w, s)| *w != words || s.is_none()) {
            let s = self.heap.script(sc);
            let was = if s.is_some() || self.heap.gone.get() { self.scripts.insert(sc, (words, s)) } else { self.scripts.remove(&sc) };
            if was.is_some() || self.scripts.contains_key(&sc) {
                self.named.clear();
            }
        }
        self.script_checked.insert(sc);
    }

    fn script(&mut self, sc: u64) -> Option<&Script> {
        if !self.script_checked.contains(&sc) && !self.heap.gone.get() {
            let m = &self.heap.m;
            let at = |off: u64| self.heap.word((sc & !m.heap_object_tag_mask) + off);
            let (Some(name), Some(source)) = (at(m.script_name), at(m.script_source)) else {
                return self.scripts.get(&sc).filter(|_| self.heap.gone.get())?.1.as_ref();
            };
            self.check_script(sc, [name, source]);
        }
        self.scripts.get(&sc)?.1.as_ref()
    }

    /// The named address of the function in JSFunction `f`.
    fn name(&mut self, f: u64, marker: &str) -> Option<u64> {
        let sfi = self.sfi_of(f)?;
        let script = self.func(sfi)?.script;
        let whole = script.is_none_or(|sc| self.script(sc).is_some());
        let key = (sfi, marker.as_bytes()[0]);
        if let Some(&a) = self.named.get(&key) {
            return Some(a);
        }
        let func = self.func(sfi)?.clone();
        let a = self.name_of(&func, marker);
        // A name without its Script's (not read this time) is not kept.
        if whole {
            self.named.insert(key, a);
        }
        Some(a)
    }

    /// The named address of `func` run in tier `marker`.
    fn name_of(&mut self, func: &Func, marker: &str) -> u64 {
        let mut name = format!("JS:{marker}{}", func.name);
        if let Some(sc) = func.script.and_then(|sc| self.script(sc)) {
            name.push(' ');
            name.push_str(&sc.name);
            if let Some(pos) = func.start {
                let (l, c) = sc.line_col(pos);
                name.push_str(&format!(":{l}:{c}"));
            }
        }
        if let Some(&a) = self.addr.get(&name) {
            return a;
        }
        let frame = Frame { jit: true, ..Frame::named(wallclock_stream::names::check(&name)) };
        let a = address_of(&name);
        self.addr.insert(name, a);
        self.names.push(NamedAddr { addr: a, frame });
        a
    }
}

/// The address that stands for a JavaScript frame, from its name alone
/// (so that every capture tool gives it the same): FNV-1a, 48 bits of it
/// above [`NAMED_ADDR_BASE`].
fn address_of(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    NAMED_ADDR_BASE | (h & 0x000f_ffff_ffff_fff0)
}
