//! Addresses to frames. One long-lived blazesym `Symbolizer`; addresses are
//! deduplicated per process (and for the kernel) and cached across chunks.
//!
//! Where a user address is looked up, in this order:
//! 1. the stream's `Maps` record for the pid: (path, file offset) against the
//!    ELF file. It describes the process as it was when captured, so it stays
//!    right after the process exited or its pid was reused;
//! 2. the live process (`/proc/PID`, perf map for JIT code, vDSO);
//! 3. a snapshot of `/proc/PID/maps` taken earlier in this run, should the
//!    process have exited mid-stream;
//! 4. `/tmp/perf-PID.map`, which JIT runtimes leave behind;
//! 5. otherwise `module+0xOFFSET`, or `[unknown]+0xADDR` with no mapping.
//!
//! A file without symbols is looked up again in its separate debug file
//! when one is installed where debuggers look (see [`crate::debugfile`]).
//! Frames left unnamed are counted per module (`unnamed_*:MODULE` counts
//! for the stream's trailer) and each module's reason is told once on
//! stderr.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

use blazesym::symbolize::source::{Elf, Kernel, Process, Source};
use blazesym::symbolize::{Input, Reason, Sym, Symbolized, Symbolizer};
use blazesym::{MaybeDefault, Pid};
use wallclock_stream::{Frame, MapEntry, Maps, Record, Stack, UNNAMED_ADDRS, UNNAMED_COUNT, UNNAMED_NS};

use crate::gil;
use crate::names;
use crate::procmaps::{self, PerfMap};

/// Module name given to kernel frames.
pub const KERNEL_MODULE: &str = "[kernel]";

#[derive(Debug, Clone, Default)]
pub struct Options {
    pub no_inline: bool,
    pub no_demangle: bool,
    pub no_lines: bool,
    /// Never look at live processes: only Maps records and perf map files.
    pub no_live: bool,
    /// Symbolize stacks that already have frames again.
    pub force: bool,
    /// Drop raw addresses once symbolized.
    pub strip: bool,
    pub kallsyms: Option<PathBuf>,
    pub quiet: bool,
    /// Name in warnings (`stacksym` when empty).
    pub tool: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Space {
    User(u32),
    Kernel,
}

/// (address space, address, is a return address).
type Key = (Space, u64, bool);

/// One address to resolve: its index in the batch, the address as captured
/// and the address to look up (`addr - 1` for a return address).
#[derive(Debug, Clone, Copy)]
struct Item {
    idx: usize,
    addr: u64,
    lookup: u64,
}

pub struct Engine {
    symbolizer: Symbolizer,
    opts: Options,
    stream_maps: HashMap<u32, Vec<MapEntry>>,
    /// Frames the capture named itself (`Maps::names`), per pid.
    named: HashMap<u32, HashMap<u64, Frame>>,
    snapshots: HashMap<u32, Vec<MapEntry>>,
    perf_maps: HashMap<u32, Option<PerfMap>>,
    /// Does the file at this path still carry this build id?
    build_id_ok: HashMap<(String, String), bool>,
    /// Frames of each address, already serialized: the JSON objects joined
    /// by commas (no clone of a `Frame` per record written).
    cache: HashMap<Key, Box<str>>,
    /// The same frames bincode-encoded (count, bytes), made from `cache`
    /// on first use by the binary framing.
    bin_cache: HashMap<Key, (usize, Box<[u8]>)>,
    warned: HashSet<String>,
    /// Our own vDSO as a file, made on first need (`None` inside: failed).
    vdso: Option<Option<crate::vdso::VdsoFile>>,
    /// The module of each cached address left unnamed.
    unnamed_keys: HashMap<Key, Box<str>>,
    /// Why a module's frames had no name, as found while resolving.
    why: HashMap<String, String>,
    /// Counts not yet written to a trailer: `unnamed_*:MODULE`.
    pending: BTreeMap<String, u64>,
    warned_modules: HashSet<String>,
}

impl Engine {
    pub fn new(opts: Options) -> Self {
        let symbolizer = Symbolizer::builder()
            .enable_inlined_fns(!opts.no_inline)
            .enable_demangling(!opts.no_demangle)
            .enable_code_info(!opts.no_lines)
            .build();
        Engine {
            symbolizer,
            opts,
            stream_maps: HashMap::new(),
            named: HashMap::new(),
            snapshots: HashMap::new(),
            perf_maps: HashMap::new(),
            build_id_ok: HashMap::new(),
            cache: HashMap::new(),
            bin_cache: HashMap::new(),
            warned: HashSet::new(),
            vdso: None,
            unnamed_keys: HashMap::new(),
            why: HashMap::new(),
            pending: BTreeMap::new(),
            warned_modules: HashSet::new(),
        }
    }

    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// Remember a process's mappings; several records for one pid add up,
    /// the later winning where they overlap.
    pub fn add_maps(&mut self, m: &Maps) {
        let maps = m.maps.iter().map(|e| self.absolute(e));
        let maps: Vec<MapEntry> = maps.collect();
        self.stream_maps.entry(m.pid).or_default().extend(maps);
        if !m.names.is_empty() {
            self.named.entry(m.pid).or_default().extend(m.names.iter().map(|n| (n.addr, n.frame.clone())));
        }
    }

    /// A relative path (a hand-made or generated Maps record) is taken from
    /// the current directory, as a shell would; /proc never writes one.
    fn absolute(&mut self, e: &MapEntry) -> MapEntry {
        if e.path.is_empty() || e.path.starts_with('/') || e.path.starts_with('[') {
            return e.clone();
        }
        match std::path::absolute(&e.path) {
            Ok(p) if p.exists() => MapEntry { path: p.display().to_string(), ..e.clone() },
            _ => {
                self.warn(format!("{}: relative path in a maps record, not found from the current directory", e.path));
                e.clone()
            }
        }
    }

    pub fn needs(&self, s: &Stack) -> bool {
        (!s.ustack.is_empty() || !s.kstack.is_empty()) && (s.frames.is_empty() || self.opts.force)
    }

    /// Learn the maps records among `records`, then resolve the addresses
    /// of the stacks among them that need names.
    pub fn prepare_records(&mut self, records: &[Record]) {
        for r in records {
            if let Record::Maps(m) = r {
                self.add_maps(m);
            }
        }
        let todo: Vec<&Stack> = records
            .iter()
            .filter_map(|r| match r {
                Record::Stack(s) if self.needs(s) => Some(s),
                _ => None,
            })
            .collect();
        self.prepare(todo.into_iter());
    }

    /// Resolve every address of `stacks` not already cached.
    pub fn prepare<'a>(&mut self, stacks: impl Iterator<Item = &'a Stack>) {
        if self.cache.len() > CACHE_MAX {
            self.cache.clear();
            self.bin_cache.clear();
        }
        let mut user: HashMap<u32, Vec<(u64, bool)>> = HashMap::new();
        let mut kernel: Vec<(u64, bool)> = Vec::new();
        let mut seen: HashSet<Key> = HashSet::new();
        for s in stacks {
            for (space, addrs) in [(Space::User(s.pid), &s.ustack), (Space::Kernel, &s.kstack)] {
                for (i, &a) in addrs.iter().enumerate() {
                    let key = (space, a, i + 1 < addrs.len());
                    if self.cache.contains_key(&key) || !seen.insert(key) {
                        continue;
                    }
                    match space {
                        Space::User(pid) => user.entry(pid).or_default().push((a, key.2)),
                        Space::Kernel => kernel.push((a, key.2)),
                    }
                }
            }
        }
        if !kernel.is_empty() {
            let frames = self.resolve_kernel(&kernel);
            for ((a, ret), f) in kernel.into_iter().zip(frames) {
                self.remember((Space::Kernel, a, ret), &f);
            }
        }
        let mut pids: Vec<u32> = user.keys().copied().collect();
        pids.sort_unstable();
        for pid in pids {
            let keys = &user[&pid];
            let frames = self.resolve_user(pid, keys);
            for (&(a, ret), f) in keys.iter().zip(frames) {
                self.remember((Space::User(pid), a, ret), &f);
            }
        }
    }

    fn remember(&mut self, key: Key, frames: &[Frame]) {
        if let Some(m) = frames.iter().find_map(Frame::unnamed_module) {
            if !self.unnamed_keys.contains_key(&key) {
                *self.pending.entry(format!("{UNNAMED_ADDRS}{m}")).or_insert(0) += 1;
            }
            if self.warned_modules.insert(m.to_string()) {
                let why = self.why.get(m).cloned().unwrap_or_else(|| "no symbol covers these addresses".into());
                self.warn(format!("frames left as {m}+0x...: {why}"));
            }
            self.unnamed_keys.insert(key, m.into());
        }
        self.cache.insert(key, to_json(frames));
    }

    /// Count the time of `s` under each module it has unnamed frames in
    /// (once per module). Call after [`Engine::prepare`] saw `s`.
    pub fn account(&mut self, s: &Stack) {
        if self.unnamed_keys.is_empty() {
            return;
        }
        let mut mods: Vec<&str> = Vec::new();
        for (space, addrs) in [(Space::User(s.pid), &s.ustack), (Space::Kernel, &s.kstack)] {
            for (i, &a) in addrs.iter().enumerate() {
                if let Some(m) = self.unnamed_keys.get(&(space, a, i + 1 < addrs.len())) {
                    if !mods.contains(&&**m) {
                        mods.push(m);
                    }
                }
            }
        }
        let names: Vec<String> = mods.into_iter().map(str::to_string).collect();
        for m in names {
            *self.pending.entry(format!("{UNNAMED_NS}{m}")).or_insert(0) += s.ns;
            *self.pending.entry(format!("{UNNAMED_COUNT}{m}")).or_insert(0) += s.count;
        }
    }

    /// The `unnamed_*:MODULE` counts gathered since the last call, for the
    /// stream's trailer.
    pub fn take_counts(&mut self) -> BTreeMap<String, u64> {
        std::mem::take(&mut self.pending)
    }

    /// The frames of `s` (root first: the user part, then the kernel part)
    /// as the elements of a JSON array, appended to `buf`. Call after
    /// [`Engine::prepare`] saw `s`.
    pub fn write_frames(&self, s: &Stack, buf: &mut Vec<u8>) {
        let mut first = true;
        for (space, addrs) in [(Space::User(s.pid), &s.ustack), (Space::Kernel, &s.kstack)] {
            for (i, &a) in addrs.iter().enumerate() {
                if let Some(f) = self.cache.get(&(space, a, i + 1 < addrs.len())).filter(|f| !f.is_empty()) {
                    if !first {
                        buf.push(b',');
                    }
                    if matches!(space, Space::User(_)) && gil::before(s, f) {
                        buf.extend_from_slice(gil::GIL_JSON.as_bytes());
                        buf.push(b',');
                    }
                    buf.extend_from_slice(f.as_bytes());
                    first = false;
                }
            }
        }
    }

    /// Like [`Engine::write_frames`], for the binary framing: the frames
    /// bincode-encoded back to back; returns how many.
    pub fn write_frames_bincode(&mut self, s: &Stack, buf: &mut Vec<u8>) -> usize {
        let mut n = 0;
        for (space, addrs) in [(Space::User(s.pid), &s.ustack), (Space::Kernel, &s.kstack)] {
            for (i, &a) in addrs.iter().enumerate() {
                let key = (space, a, i + 1 < addrs.len());
                let Some(json) = self.cache.get(&key) else { continue };
                if matches!(space, Space::User(_)) && gil::before(s, json) {
                    wallclock_stream::binary::encode_frames(&[gil::frame()], buf).expect("a Frame encodes");
                    n += 1;
                }
                let (k, bytes) = self.bin_cache.entry(key).or_insert_with(|| {
                    let frames: Vec<Frame> =
                        serde_json::from_str(&format!("[{json}]")).expect("frames we serialized ourselves");
                    let mut b = Vec::new();
                    wallclock_stream::binary::encode_frames(&frames, &mut b).expect("a Frame encodes");
                    (frames.len(), b.into_boxed_slice())
                });
                n += *k;
                buf.extend_from_slice(bytes);
            }
        }
        n
    }

    /// The frames of `s`, root first (see [`Engine::write_frames`]).
    pub fn frames(&self, s: &Stack) -> Vec<Frame> {
        let mut buf = b"[".to_vec();
        self.write_frames(s, &mut buf);
        buf.push(b']');
        serde_json::from_slice(&buf).expect("frames we serialized ourselves")
    }

    fn warn(&mut self, what: String) {
        if !self.opts.quiet && self.warned.insert(what.clone()) {
            let tool = if self.opts.tool.is_empty() { "stacksym" } else { self.opts.tool };
            eprintln!("{tool}: warning: {what}");
        }
    }

    fn resolve_kernel(&mut self, keys: &[(u64, bool)]) -> Vec<Vec<Frame>> {
        let lookups: Vec<u64> = keys.iter().map(|&(a, ret)| lookup(a, ret)).collect();
        let kallsyms = match &self.opts.kallsyms {
            Some(p) => MaybeDefault::Some(p.clone()),
            None => MaybeDefault::Default,
        };
        let src = Source::Kernel(Kernel { kallsyms, ..Kernel::default() });
        let unresolved = |a: u64| vec![Frame { module: Some(KERNEL_MODULE.into()), ..Frame::kernel(names::module_offset(KERNEL_MODULE, a)) }];
        let res = match self.symbolizer.symbolize(&src, Input::AbsAddr(&lookups)) {
            Ok(r) => r
                .iter()
                .zip(keys)
                .map(|(s, &(a, _))| match s {
                    Symbolized::Sym(sym) => sym_frames(sym, Some(KERNEL_MODULE), &self.opts, true, false)
                        .unwrap_or_else(|| unresolved(a)),
                    Symbolized::Unknown(_) => unresolved(a),
                })
                .collect(),
            Err(e) => {
                let msg = format!("kernel symbols unavailable: {e}");
                self.warn(msg);
                return keys.iter().map(|&(a, _)| unresolved(a)).collect();
            }
        };
        res
    }

    fn resolve_user(&mut self, pid: u32, keys: &[(u64, bool)]) -> Vec<Vec<Frame>> {
        let mut out: Vec<Option<Vec<Frame>>> = vec![None; keys.len()];
        // 0. Frames the capture named (an interpreter's: CPython's).
        if let Some(named) = self.named.get(&pid) {
            for (idx, (addr, _)) in keys.iter().enumerate() {
                if let Some(f) = named.get(addr) {
                    out[idx] = Some(vec![f.clone()]);
                }
            }
        }
        let items: Vec<Item> = keys
            .iter()
            .enumerate()
            .filter(|&(idx, _)| out[idx].is_none())
            .map(|(idx, &(addr, ret))| Item { idx, addr, lookup: lookup(addr, ret) })
            .collect();
        let live = !self.opts.no_live && procmaps::is_live(pid);
        if live {
            if let Some(m) = procmaps::read_proc_maps(pid) {
                self.snapshots.insert(pid, m);
            }
        }
        let stream_maps = self.stream_maps.get(&pid).cloned().unwrap_or_default();
        let snapshot = self.snapshots.get(&pid).cloned().unwrap_or_default();

        // 1. The stream's Maps record.
        self.resolve_in_files(&stream_maps, &items, &mut out);
        // 2. The live process.
        if live {
            self.resolve_live(pid, &snapshot, &items, &mut out);
        }
        // 3. A snapshot of a process that exited mid-stream.
        self.resolve_in_files(&snapshot, &items, &mut out);
        // 4. A JIT runtime's perf map, 5. module+offset.
        let perf_map = self.perf_maps.entry(pid).or_insert_with(|| PerfMap::load(pid));
        for it in &items {
            if out[it.idx].is_some() {
                continue;
            }
            if let Some(name) = perf_map.as_ref().and_then(|p| p.lookup(it.lookup)) {
                out[it.idx] = Some(vec![Frame { jit: true, ..Frame::named(name) }]);
                continue;
            }
            let entry = procmaps::find(&stream_maps, it.lookup).or_else(|| procmaps::find(&snapshot, it.lookup));
            let why = match entry {
                None if live => format!("pid {pid}: not in any mapping of the process"),
                None => format!("pid {pid}: not running and no maps record in the stream for it"),
                Some(m) if m.path.is_empty() => format!("pid {pid}: anonymous memory (JIT code?) and no /tmp/perf-{pid}.map"),
                Some(_) => "no symbol covers these addresses".into(),
            };
            let frame = unresolved_frame(entry, it.addr);
            if let Some(m) = frame.unnamed_module() {
                self.why.entry(m.to_string()).or_insert(why);
            }
            out[it.idx] = Some(vec![frame]);
        }
        out.into_iter().map(Option::unwrap_or_default).collect()
    }

    /// Look up the items falling in file-backed `maps` entries, against the
    /// files, by file offset. An unreadable file leaves its items for later.
    fn resolve_in_files(&mut self, maps: &[MapEntry], items: &[Item], out: &mut [Option<Vec<Frame>>]) {
        let mut by_file: HashMap<usize, Vec<(Item, u64)>> = HashMap::new();
        for it in items.iter().filter(|it| out[it.idx].is_none()) {
            if let Some(i) = procmaps::find_idx(maps, it.lookup).filter(|&i| procmaps::is_file(&maps[i]) || maps[i].path == "[vdso]") {
                let m = &maps[i];
                by_file.entry(i).or_default().push((*it, it.lookup - m.start + m.offset));
            }
        }
        let mut files: Vec<_> = by_file.into_iter().collect();
        files.sort_by_key(|(i, _)| (maps[*i].path.clone(), maps[*i].start));
        for (i, list) in files {
            let m = &maps[i];
            if !self.build_id_matches(m) {
                continue;
            }
            let offs: Vec<u64> = list.iter().map(|(_, off)| *off).collect();
            let elf_path = if m.path == "[vdso]" {
                match self.vdso.get_or_insert_with(crate::vdso::VdsoFile::create) {
                    Some(v) => v.path.clone(),
                    None => continue,
                }
            } else {
                std::path::PathBuf::from(&m.path)
            };
            let module = names::basename(&m.path);
            let src = Source::Elf(Elf::new(elf_path.clone()));
            match self.symbolizer.symbolize(&src, Input::FileOffset(&offs)) {
                Ok(res) => {
                    // Frames, or why not (a stripped file: its debug file may help).
                    let mut found: Vec<Result<Vec<Frame>, bool>> = res
                        .iter()
                        .map(|s| match s {
                            Symbolized::Sym(sym) => sym_frames(sym, Some(module), &self.opts, false, false).ok_or(false),
                            Symbolized::Unknown(r) => Err(*r == Reason::MissingSyms),
                        })
                        .collect();
                    drop(res);
                    if m.path != "[vdso]" && found.contains(&Err(true)) {
                        let (frames, why) = crate::debugfile::symbolize_stripped(&self.symbolizer, &self.opts, &elf_path, &offs, &found);
                        for (f, named) in found.iter_mut().zip(frames) {
                            if let Some(named) = named {
                                *f = Ok(named);
                            }
                        }
                        self.why.entry(module.to_string()).or_insert(why);
                    }
                    for ((it, _), f) in list.iter().zip(found) {
                        out[it.idx] = Some(f.unwrap_or_else(|_| vec![unresolved_frame(Some(m), it.addr)]));
                    }
                }
                Err(e) => {
                    let msg = format!("{}: {e}", m.path);
                    self.warn(msg);
                }
            }
        }
    }

    /// blazesym's process source: `/proc/PID/maps` and `map_files`, the vDSO
    /// and `/tmp/perf-PID.map` for code in anonymous mappings (JIT).
    fn resolve_live(&mut self, pid: u32, snapshot: &[MapEntry], items: &[Item], out: &mut [Option<Vec<Frame>>]) {
        let todo: Vec<Item> = items.iter().filter(|it| out[it.idx].is_none()).copied().collect();
        if todo.is_empty() {
            return;
        }
        let lookups: Vec<u64> = todo.iter().map(|it| it.lookup).collect();
        let src = Source::Process(Process::new(Pid::from(pid)));
        let res = match self.symbolizer.symbolize(&src, Input::AbsAddr(&lookups)) {
            Ok(r) => r,
            Err(e) => {
                let msg = format!("pid {pid}: {e}");
                self.warn(msg);
                return;
            }
        };
        for (it, s) in todo.iter().zip(&res) {
            let entry = procmaps::find(snapshot, it.lookup);
            let Symbolized::Sym(sym) = s else { continue };
            // Code outside any file (perf map) is JIT code.
            let anonymous = match entry {
                Some(m) => m.path.is_empty(),
                None => true,
            };
            let jit = sym.module.is_none() && anonymous;
            let module = match (entry, &sym.module) {
                (Some(m), _) if !m.path.is_empty() => Some(names::basename(&m.path).to_string()),
                (_, Some(m)) => Some(names::basename(&m.to_string_lossy()).to_string()),
                _ => None,
            };
            if let Some(f) = sym_frames(sym, module.as_deref(), &self.opts, false, jit) {
                out[it.idx] = Some(f);
            }
        }
    }

    fn build_id_matches(&mut self, m: &MapEntry) -> bool {
        let Some(want) = &m.build_id else { return true };
        let key = (m.path.clone(), want.to_ascii_lowercase());
        if let Some(&ok) = self.build_id_ok.get(&key) {
            return ok;
        }
        let have = blazesym::helper::read_elf_build_id(&m.path)
            .ok()
            .flatten()
            .map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>());
        let ok = have.as_deref() == Some(key.1.as_str());
        if !ok {
            self.warn(format!("{}: build id is not {} any more; frames shown as module+offset", m.path, want));
        }
        self.build_id_ok.insert(key, ok);
        ok
    }
}

/// Addresses cached before the cache is emptied (bounds memory on huge,
/// diverse inputs; a few hundred bytes each).
const CACHE_MAX: usize = 1 << 20;

fn to_json(frames: &[Frame]) -> Box<str> {
    let parts: Vec<String> = frames.iter().map(|f| serde_json::to_string(f).expect("a Frame serializes")).collect();
    parts.join(",").into_boxed_str()
}

fn lookup(addr: u64, ret: bool) -> u64 {
    if ret {
        addr.saturating_sub(1)
    } else {
        addr
    }
}

/// `module+0xFILEOFFSET` in a known mapping, `[unknown]+0xADDR` elsewhere.
fn unresolved_frame(entry: Option<&MapEntry>, addr: u64) -> Frame {
    match entry {
        Some(m) => {
            let module = if m.path.is_empty() { "[anon]" } else { m.path.as_str() };
            let off = addr.wrapping_sub(m.start).wrapping_add(m.offset);
            Frame { module: Some(names::basename(module).to_string()), ..Frame::named(names::module_offset(module, off)) }
        }
        None => Frame::named(names::unknown_addr(addr)),
    }
}

/// A symbol and the functions inlined into it at that address, outer first.
pub(crate) fn sym_frames(sym: &Sym, module: Option<&str>, opts: &Options, kernel: bool, jit: bool) -> Option<Vec<Frame>> {
    if sym.name.is_empty() {
        return None;
    }
    let name = |n: &str| if opts.no_demangle { n.to_string() } else { names::demangle(n) };
    let frame = |func: &str, code: Option<&blazesym::symbolize::CodeInfo>, inlined: bool| Frame {
        func: name(func),
        module: module.map(str::to_string),
        file: code.map(|c| c.to_path().display().to_string()),
        line: code.and_then(|c| c.line),
        inlined,
        kernel,
        jit,
    };
    let mut out = vec![frame(&sym.name, sym.code_info.as_deref(), false)];
    for f in sym.inlined.iter() {
        out.push(frame(&f.name, f.code_info.as_ref(), true));
    }
    Some(out)
}
