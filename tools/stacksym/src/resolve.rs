//! Where an address gets its frames: the kernel's symbols, the files of a
//! process's mappings (the stream's maps record, a snapshot of /proc), the
//! live process, a JIT perf map, else `module+0xOFFSET` (the order is told
//! in [`crate::engine`]).

use std::collections::HashMap;
use std::rc::Rc;

use blazesym::symbolize::source::{Elf, Kernel, Process, Source};
use blazesym::symbolize::{Input, Reason, Symbolized};
use blazesym::{MaybeDefault, Pid};
use wallclock_stream::Frame;

use crate::engine::{Engine, KERNEL_MODULE};
use crate::names;
use crate::engine::procmaps::{self, Mapping, PerfMap};

/// One address to resolve: its index in the batch, the address as captured
/// and the address to look up (`addr - 1` for a return address).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Item {
    idx: usize,
    addr: u64,
    lookup: u64,
    ret: bool,
}

impl Engine {
    pub(crate) fn resolve_kernel(&mut self, keys: &[(u64, bool)]) -> Vec<Vec<Frame>> {
        // BPF programs and addresses past a symbol's code first (crate::engine::ktext).
        let decided: Vec<Option<Frame>> = keys.iter().map(|&(a, ret)| self.kernel_frame(a, lookup(a, ret))).collect();
        let rest: Vec<(u64, bool)> = keys.iter().zip(&decided).filter(|(_, d)| d.is_none()).map(|(k, _)| *k).collect();
        let mut named = if rest.is_empty() { Vec::new() } else { self.resolve_kernel_syms(&rest) }.into_iter();
        decided.into_iter().map(|d| d.map(|f| vec![f]).or_else(|| named.next()).unwrap_or_default()).collect()
    }

    /// [`Engine::resolve_kernel`] by the symbolizer (kallsyms' nearest symbol).
    fn resolve_kernel_syms(&mut self, keys: &[(u64, bool)]) -> Vec<Vec<Frame>> {
        let lookups: Vec<u64> = keys.iter().map(|&(a, ret)| lookup(a, ret)).collect();
        let kallsyms = match (&self.opts.kallsyms, self.kallsyms.path()) {
            (Some(p), _) => MaybeDefault::Some(p.clone()),
            (None, Some(p)) => MaybeDefault::Some(p.to_path_buf()),
            (None, None) => MaybeDefault::Default,
        };
        let src = Source::Kernel(Kernel { kallsyms, ..Kernel::default() });
        let unresolved = |a: u64| vec![Frame { module: Some(KERNEL_MODULE.into()), ..Frame::kernel(names::module_offset(KERNEL_MODULE, a)) }];
        let res = match self.symbolizer.symbolize(&src, Input::AbsAddr(&lookups)) {
            Ok(r) => r
                .iter()
                .zip(keys)
                .map(|(s, &(a, _))| match s {
                    Symbolized::Sym(sym) => names::sym_frames(sym, Some(KERNEL_MODULE), self.opts.no_demangle, true, false)
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

    /// The frames of each of `keys` (address, is a return address) in
    /// `pid`, as ids of the table.
    pub(crate) fn resolve_user(&mut self, pid: u32, keys: &[(u64, bool)]) -> Vec<Rc<[u32]>> {
        let mut out: Vec<Option<Rc<[u32]>>> = vec![None; keys.len()];
        // A later process of a reused pid with no maps record of its own
        // (the capture wrote one record for both when the new process's
        // stacks came before the old one was done): the pid's record, as
        // before `pgen`.
        let pid = match pid {
            p if p > crate::engine::PID_MASK && !self.stream_maps.contains_key(&p) => p & crate::engine::PID_MASK,
            p => p,
        };
        // 0. Frames the capture named (an interpreter's: CPython's).
        if let Some(named) = self.named.get(&pid) {
            for (idx, (addr, _)) in keys.iter().enumerate() {
                if let Some(f) = named.get(addr) {
                    out[idx] = Some(Rc::new([self.table.frame_id(f)]));
                }
            }
        }
        let items: Vec<Item> = keys
            .iter()
            .enumerate()
            .filter(|&(idx, _)| out[idx].is_none())
            .map(|(idx, &(addr, ret))| Item { idx, addr, lookup: lookup(addr, ret), ret })
            .collect();
        let live = !self.opts.no_live && procmaps::is_live(pid);
        if live {
            if let Some(m) = procmaps::read_proc_maps(pid, &mut self.strings) {
                self.snapshots.insert(pid, m);
            }
        }
        let stream_maps = self.stream_maps.get(&pid).cloned().unwrap_or_default();
        let snapshot = self.snapshots.get(&pid).cloned().unwrap_or_default();
        let runtime = self.runtime(pid);

        // 1. The stream's Maps record.
        self.resolve_in_files(&stream_maps, &items, &mut out);
        // 2. The live process.
        if live {
            self.resolve_live(pid, &snapshot, &items, &mut out);
        }
        // 3. A snapshot of a process that exited mid-stream.
        self.resolve_in_files(&snapshot, &items, &mut out);
        // 4. A JIT runtime's perf map, 5. module+offset.
        if items.iter().all(|it| out[it.idx].is_some()) {
            return out.into_iter().map(Option::unwrap_or_default).collect();
        }
        // Read again when the file changed since (a runtime that writes it
        // as it compiles): a name must not be missed for reading it early.
        let stale = self.perf_maps.get(&pid).is_none_or(|p| p.as_ref().is_none_or(PerfMap::changed));
        if stale {
            let loaded = match PerfMap::load(pid) {
                Ok(p) => p,
                // Its symbols unused, said once (the rest of the stack is named).
                Err((p, why)) => {
                    self.warn(why.to_string());
                    Some(p)
                }
            };
            self.perf_maps.insert(pid, loaded);
        }
        let perf_map = &self.perf_maps[&pid];
        for it in &items {
            if out[it.idx].is_some() {
                continue;
            }
            if let Some(name) = perf_map.as_ref().and_then(|p| p.lookup(it.lookup)) {
                let f = Frame { jit: true, ..Frame::named(wallclock_stream::names::check(name)) };
                out[it.idx] = Some(Rc::new([self.table.frame_id(&f)]));
                continue;
            }
            let entry = procmaps::find(&stream_maps, it.lookup).or_else(|| procmaps::find(&snapshot, it.lookup));
            // Outside every file the process mapped (its maps record lists
            // files only): anonymous memory, JIT code where a runtime runs.
            let perf_path = perf_map.as_ref().map(|p| (p.path.as_str(), p.skipped));
            // The capture read its JavaScript functions' names from V8's
            // heap: what is left is V8's own code, no flag names it.
            let runtime = if runtime == crate::engine::jit::Runtime::V8 && crate::engine::jit::v8_named(self.named.get(&pid)) { crate::engine::jit::Runtime::V8Read } else { runtime };
            let why = match entry {
                None if live => format!("pid {pid}: not in any mapping of the process"),
                None if stream_maps.is_empty() => format!("pid {pid}: not running and no maps record in the stream for it"),
                None => crate::engine::jit::why_unnamed(pid, runtime, perf_path),
                Some(m) if m.path().is_empty() => crate::engine::jit::why_unnamed(pid, runtime, perf_path),
                Some(_) => "no symbol covers these addresses".into(),
            };
            let all = stream_maps.iter().chain(snapshot.iter()).map(|m| &**m.path());
            let frame = unresolved_frame(entry.map(|m| (m, names::module_name(m.path(), all))), it.addr);
            if let Some(m) = frame.unnamed_module() {
                self.why.entry(m.to_string()).or_insert(why);
            }
            out[it.idx] = Some(Rc::new([self.table.frame_id(&frame)]));
        }
        out.into_iter().map(Option::unwrap_or_default).collect()
    }

    /// Look up the items falling in file-backed `maps` entries, against the
    /// files, by file offset. An unreadable file leaves its items for later.
    /// Frames found before for the same file offset, in any process, are
    /// taken as they are (crate::engine::cache).
    fn resolve_in_files(&mut self, maps: &[Mapping], items: &[Item], out: &mut [Option<Rc<[u32]>>]) {
        let mut by_file: HashMap<usize, Vec<(Item, u64)>> = HashMap::new();
        for it in items.iter().filter(|it| out[it.idx].is_none()) {
            if let Some(i) = procmaps::find_idx(maps, it.lookup).filter(|&i| procmaps::is_file(&maps[i]) || &**maps[i].path() == "[vdso]") {
                let m = &maps[i];
                by_file.entry(i).or_default().push((*it, it.lookup - m.start + m.offset));
            }
        }
        let mut files: Vec<_> = by_file.into_iter().collect();
        files.sort_by_key(|(i, _)| (maps[*i].path().clone(), maps[*i].start));
        for (i, list) in files {
            let m = &maps[i];
            if !self.file_ok(m) || !self.build_id_matches(m) {
                continue;
            }
            // Keyed by the address's own offset (`module+0x...` shows it)
            // and whether it is a return address (looked up one before).
            let file = self.file_id(m.path());
            let key = |it: &Item| (file, it.addr.wrapping_sub(m.start).wrapping_add(m.offset), it.ret);
            let mut list = list;
            list.retain(|(it, _)| match self.files.get(&key(it)) {
                Some(ids) => {
                    out[it.idx] = Some(ids.clone());
                    false
                }
                None => true,
            });
            if list.is_empty() {
                continue;
            }
            let offs: Vec<u64> = list.iter().map(|(_, off)| *off).collect();
            let elf_path = if &**m.path() == "[vdso]" {
                match self.vdso.get_or_insert_with(crate::vdso::VdsoFile::create) {
                    Some(v) => v.path.clone(),
                    None => continue,
                }
            } else {
                std::path::PathBuf::from(&**m.path())
            };
            let module = &*names::module_name(m.path(), maps.iter().map(|m| &**m.path()));
            let src = Source::Elf(Elf::new(elf_path.clone()));
            match self.symbolizer.symbolize(&src, Input::FileOffset(&offs)) {
                Ok(res) => {
                    // Frames, or why not (a stripped file: its debug file may help).
                    let mut found: Vec<Result<Vec<Frame>, bool>> = res
                        .iter()
                        .map(|s| match s {
                            Symbolized::Sym(sym) => names::sym_frames(sym, Some(module), self.opts.no_demangle, false, false).ok_or(false),
                            Symbolized::Unknown(r) => Err(*r == Reason::MissingSyms),
                        })
                        .collect();
                    drop(res);
                    if &**m.path() != "[vdso]" && found.contains(&Err(true)) {
                        let (frames, why) = crate::debugfile::symbolize_stripped(&self.symbolizer, &self.opts, &elf_path, &offs, &found);
                        for (f, named) in found.iter_mut().zip(frames) {
                            if let Some(named) = named {
                                *f = Ok(named);
                            }
                        }
                        self.why.entry(module.to_string()).or_insert(why);
                    }
                    for ((it, _), f) in list.iter().zip(found) {
                        let f = f.unwrap_or_else(|_| vec![unresolved_frame(Some((m, module.to_string())), it.addr)]);
                        let ids = self.intern(&f);
                        self.files.insert(key(it), ids.clone());
                        out[it.idx] = Some(ids);
                    }
                }
                Err(e) => {
                    let msg = format!("{}: {e}", m.path());
                    self.warn(msg);
                }
            }
        }
    }

    /// blazesym's process source: `/proc/PID/maps` and `map_files`, the vDSO.
    fn resolve_live(&mut self, pid: u32, snapshot: &[Mapping], items: &[Item], out: &mut [Option<Rc<[u32]>>]) {
        let todo: Vec<Item> = items.iter().filter(|it| out[it.idx].is_none()).copied().collect();
        if todo.is_empty() {
            return;
        }
        let lookups: Vec<u64> = todo.iter().map(|it| it.lookup).collect();
        // Perf maps are read here (step 4), as files the process controls:
        // blazesym's own reading follows a link the process planted, waits
        // on a fifo and maps a file of any size; and, while a live JVM
        // writes its map, failed the whole batch with "failed to parse perf
        // map" though its names were then used.
        let mut process = Process::new(Pid::from(pid));
        process.perf_map = false;
        let src = Source::Process(process);
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
                Some(m) => m.path().is_empty(),
                None => true,
            };
            let jit = sym.module.is_none() && anonymous;
            let module = match (entry, &sym.module) {
                (Some(m), _) if !m.path().is_empty() => Some(names::module_name(m.path(), snapshot.iter().map(|m| &**m.path()))),
                (_, Some(m)) => Some(names::basename(&m.to_string_lossy()).to_string()),
                _ => None,
            };
            if let Some(f) = names::sym_frames(sym, module.as_deref(), self.opts.no_demangle, false, jit) {
                out[it.idx] = Some(f.iter().map(|f| self.table.frame_id(f)).collect());
            }
        }
    }

    /// A mapped file is opened (by blazesym, by path) only when it is no
    /// link and a regular file: a process can put a fifo or a link where
    /// its binary was. Said once per file; devices' mappings are usual.
    fn file_ok(&mut self, m: &Mapping) -> bool {
        if &**m.path() == "[vdso]" {
            return true;
        }
        if let Some(&ok) = self.file_ok.get(m.path()) {
            return ok;
        }
        let ok = match wallclock_stream::safe_open::open(std::path::Path::new(&**m.path()), wallclock_stream::safe_open::Owner::Any) {
            Ok(_) => true,
            Err(why) => {
                if !why.why.ends_with(" device)") {
                    self.warn(why.to_string());
                }
                false
            }
        };
        self.file_ok.insert(m.path().clone(), ok);
        ok
    }

    fn build_id_matches(&mut self, m: &Mapping) -> bool {
        let Some(want) = m.build_id() else { return true };
        let key = (m.path().clone(), want.clone());
        if let Some(&ok) = self.build_id_ok.get(&key) {
            return ok;
        }
        let have = blazesym::helper::read_elf_build_id(&**m.path())
            .ok()
            .flatten()
            .map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>());
        let ok = have.is_some_and(|h| h.eq_ignore_ascii_case(want));
        if !ok {
            self.warn(format!("{}: build id is not {} any more; frames shown as module+offset", m.path(), want));
        }
        self.build_id_ok.insert(key, ok);
        ok
    }
}

fn lookup(addr: u64, ret: bool) -> u64 {
    if ret {
        addr.saturating_sub(1)
    } else {
        addr
    }
}

/// `module+0xFILEOFFSET` in a known mapping, `[unknown]+0xADDR` elsewhere.
/// `entry` comes with its module's name in frames (names::module_name).
fn unresolved_frame(entry: Option<(&Mapping, String)>, addr: u64) -> Frame {
    match entry {
        Some((m, name)) => {
            let module = if m.path().is_empty() { "[anon]".to_string() } else { name };
            let off = addr.wrapping_sub(m.start).wrapping_add(m.offset);
            let mut f = Frame { func: format!("{module}+{off:#x}"), module: Some(module), ..Frame::named("") };
            wallclock_stream::names::check_frame(&mut f);
            f
        }
        None => Frame::named(names::unknown_addr(addr)),
    }
}
