//! User stacks from a copy of the stack and the registers, unwound with
//! .eh_frame (framehop), so that the caller of a libc function built
//! without frame pointers is kept. Also keeps each process's executable
//! mappings for the Maps record (symbolization after the process exits).
//!
//! Exec and fork events (bpf/tree.bpf.h) arrive in order with the stacks:
//! a stack is unwound against the image that ran it. A fork child starts
//! with a copy of its parent's mappings; an exec retires a process's
//! mappings (kept for the Maps record: its earlier stacks point into them)
//! and names the inode of the new executable, so that /proc/PID/maps of a
//! still later image, read before that exec's event came, is not taken.

use std::collections::HashMap;
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};
use object::{Object, ObjectSection, ObjectSegment};
use wallclock_stream::{MapEntry, Maps};

use crate::event::WcEvent;
use crate::python::frames::Python;
use crate::python::trampoline::Trampolines;

/// The kernel maps nothing below this (vm.mmap_min_addr's default).
const MIN_CODE_ADDR: u64 = 0x10000;
const MAX_FRAMES: usize = 256;

/// Unwind data of one ELF file, shared by every process that maps it.
struct FileInfo {
    build_id: Option<String>,
    /// (p_offset, p_vaddr, p_filesz) of each PT_LOAD segment.
    segments: Vec<(u64, u64, u64)>,
    sections: Option<ExplicitModuleSectionInfo<Arc<[u8]>>>,
}

fn load_file(path: &str) -> Option<FileInfo> {
    if !path.starts_with('/') {
        return None;
    }
    let data = crate::elf::map_file(path)?;
    let obj = object::File::parse(&*data).ok()?;
    let build_id = obj.build_id().ok().flatten().map(|b| b.iter().map(|x| format!("{x:02x}")).collect());
    let segments = obj
        .segments()
        .map(|s| {
            let (off, size) = s.file_range();
            (off, s.address(), size)
        })
        .collect();
    let sect = |name: &str| -> (Option<std::ops::Range<u64>>, Option<Arc<[u8]>>) {
        match obj.section_by_name(name) {
            Some(s) => (Some(s.address()..s.address() + s.size()), s.data().ok().map(Arc::from)),
            None => (None, None),
        }
    };
    let (text_svma, text) = sect(".text");
    let (eh_frame_svma, eh_frame) = sect(".eh_frame");
    let (eh_frame_hdr_svma, eh_frame_hdr) = sect(".eh_frame_hdr");
    let (got_svma, _) = sect(".got");
    let debug_frame = obj.section_by_name(".debug_frame").and_then(|s| s.data().ok()).map(Arc::from);
    let sections = Some(ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma,
        text,
        got_svma,
        eh_frame_svma,
        eh_frame,
        eh_frame_hdr_svma,
        eh_frame_hdr,
        debug_frame,
        ..Default::default()
    });
    Some(FileInfo { build_id, segments, sections })
}

struct Proc {
    /// Identity (device, inode) of the executable the maps belong to: an
    /// exec replaces every mapping, so the old ones must not linger.
    exe: Option<(u64, u64)>,
    maps: Vec<MapEntry>,
    unwinder: UnwinderX86_64<Arc<[u8]>>,
    cache: CacheX86_64,
}

impl Proc {
    fn new(exe: Option<(u64, u64)>) -> Proc {
        Proc { exe, maps: Vec::new(), unwinder: UnwinderX86_64::new(), cache: CacheX86_64::new() }
    }
}

/// Unwinders and mappings of every process seen.
#[derive(Default)]
pub struct Unwind {
    files: HashMap<String, Option<FileInfo>>,
    procs: HashMap<u32, Proc>,
    /// Mappings of an executable a process has since exec'd away from: its
    /// stacks from before the exec still need them to be symbolized.
    retired: HashMap<u32, Vec<MapEntry>>,
    /// Reloads of /proc/PID/maps after an address outside every mapping,
    /// per image.
    reloads: HashMap<u32, u32>,
    /// Inode of the executable each pid ran at its last exec event.
    exec_ino: HashMap<u32, u64>,
    /// CPython's `-X perf` trampolines (anonymous code without unwind info).
    trampolines: Trampolines,
    /// CPython's own frames, read in BPF (python::frames).
    pub python: Python,
}

fn exe_identity(pid: u32) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(format!("/proc/{pid}/exe")).ok()?;
    Some((m.dev(), m.ino()))
}

fn parse_maps(pid: u32) -> Vec<MapEntry> {
    let maps = wallclock_stream::procmaps::read(pid).unwrap_or_default();
    maps.into_iter()
        .filter(|m| m.executable())
        // Files, and the vDSO (so its frames read `[vdso]+0x..` after exit
        // rather than an anonymous address).
        .filter(|m| m.entry.path.starts_with('/') || m.entry.path == "[vdso]")
        .map(|m| {
            let mut e = m.entry;
            if let Some(p) = e.path.strip_suffix(" (deleted)") {
                e.path = p.to_string();
            }
            e
        })
        .collect()
}

impl Unwind {
    pub fn new() -> Self {
        Self::default()
    }

    /// Read (or re-read) the mappings of `pid` while it lives, unless it
    /// runs another image than the one its stacks being unwound come from
    /// (an exec whose event is still to come).
    pub fn refresh(&mut self, pid: u32) {
        let maps = parse_maps(pid);
        if maps.is_empty() {
            return;
        }
        let exe = exe_identity(pid);
        let same_image = match (self.procs.get(&pid), self.exec_ino.get(&pid)) {
            (Some(p), _) => p.exe == exe,
            (None, Some(&ino)) => exe.is_some_and(|e| e.1 == ino),
            (None, None) => true,
        };
        if !same_image {
            return;
        }
        let mut proc = self.procs.remove(&pid).unwrap_or_else(|| Proc::new(exe));
        self.add_maps(&mut proc, maps);
        self.procs.insert(pid, proc);
    }

    /// A new process `child` of `parent`: until it execs, it runs its
    /// parent's image at its parent's addresses.
    pub fn fork(&mut self, parent: u32, child: u32) {
        if self.procs.contains_key(&child) {
            return;
        }
        // Read the parent now: what it mapped since its maps were last read
        // (libc, when they were read just after its own exec) is the child's.
        self.refresh(parent);
        let Some(p) = self.procs.get(&parent) else { return };
        let (exe, maps) = (p.exe, p.maps.clone());
        self.trampolines.fork(parent, child);
        let mut proc = Proc::new(exe);
        self.add_maps(&mut proc, maps);
        self.procs.insert(child, proc);
    }

    /// `pid` exec'd the file with inode `ino`: its mappings so far serve
    /// only the stacks that came before; read the new ones while it lives.
    pub fn exec(&mut self, pid: u32, ino: u64) {
        if let Some(old) = self.procs.remove(&pid) {
            self.retired.entry(pid).or_default().extend(old.maps);
        }
        self.exec_ino.insert(pid, ino);
        self.reloads.remove(&pid);
        self.refresh(pid);
    }

    fn add_maps(&mut self, proc: &mut Proc, maps: Vec<MapEntry>) {
        for mut m in maps {
            if proc.maps.iter().any(|o| o.start == m.start && o.path == m.path) {
                continue;
            }
            let fi = self.files.entry(m.path.clone()).or_insert_with(|| load_file(&m.path));
            if let Some(fi) = fi {
                m.build_id = fi.build_id.clone();
                if let Some(base_avma) = crate::elf::load_bias(&fi.segments, m.start, m.offset) {
                    if let Some(sec) = fi.sections.clone() {
                        proc.unwinder.add_module(Module::new(m.path.clone(), m.start..m.end, base_avma, sec));
                    }
                }
            }
            proc.maps.push(m);
        }
    }

    fn covered(&self, pid: u32, addr: u64) -> bool {
        self.procs.get(&pid).is_some_and(|p| p.maps.iter().any(|m| addr >= m.start && addr < m.end))
    }

    /// User stack, root first: the leaf is `ip`, the others return addresses.
    pub fn unwind(&mut self, pid: u32, ip: u64, sp: u64, bp: u64, stack: &[u8]) -> Vec<u64> {
        if ip == 0 {
            return Vec::new();
        }
        if !self.covered(pid, ip) {
            self.reload(pid);
        }
        let v = self.unwind_known(pid, ip, sp, bp, stack);
        // A frame outside every known mapping: a library loaded since the
        // last read of the maps (dlopen). Read them again, once per miss.
        if v.len() > 1 && !v[1..].iter().all(|&a| self.covered(pid, a)) && self.reload(pid) {
            return self.unwind_known(pid, ip, sp, bp, stack);
        }
        v
    }

    /// The user stack of a stack event, root first: unwound, with the
    /// Python frames it carries put where the interpreter ran them.
    pub fn event_stack(&mut self, e: &WcEvent) -> Vec<u64> {
        let mut native = self.unwind(e.pid, e.ip, e.sp, e.bp, e.ustack_bytes());
        if e.py_n > 0 && self.python.is_python(e.pid) {
            // Under -X perf too: the Python frames read from the
            // interpreter stand for its trampolines' perf-map names (the
            // same names, with lines), which would repeat each one.
            let covered: Vec<bool> = native.iter().map(|&a| self.covered(e.pid, a)).collect();
            let mut i = 0;
            native.retain(|&a| {
                i += 1;
                covered[i - 1] || !self.trampolines.contains(e.pid, a)
            });
        }
        self.python.splice(e, native)
    }

    fn reload(&mut self, pid: u32) -> bool {
        let n = self.reloads.entry(pid).or_default();
        if *n >= 64 {
            return false;
        }
        *n += 1;
        let before = self.procs.get(&pid).map_or(0, |p| p.maps.len());
        self.refresh(pid);
        self.procs.get(&pid).is_some_and(|p| p.maps.len() > before)
    }

    fn unwind_known(&mut self, pid: u32, ip: u64, sp: u64, bp: u64, stack: &[u8]) -> Vec<u64> {
        let Some(p) = self.procs.get_mut(&pid) else { return vec![ip] };
        let read = |addr: u64| -> Result<u64, ()> {
            let off = addr.checked_sub(sp).ok_or(())? as usize;
            let b = stack.get(off..off + 8).ok_or(())?;
            Ok(u64::from_le_bytes(b.try_into().unwrap()))
        };
        let mut out = Vec::new();
        let mut regs = UnwindRegsX86_64::new(ip, sp, bp);
        let mut addr = FrameAddress::from_instruction_pointer(ip);
        loop {
            let a = addr.address();
            // Below vm.mmap_min_addr no code can be mapped: not a return
            // address but the end of the stack (a thread stopped in _start
            // has argc where a caller's address would be).
            if a < MIN_CODE_ADDR {
                break;
            }
            out.push(a);
            if out.len() >= MAX_FRAMES {
                break;
            }
            // Code outside every file mapping may be a CPython trampoline.
            let anon = !p.maps.iter().any(|m| a >= m.start && a < m.end);
            let leaf = !addr.is_return_address();
            let step = anon.then(|| self.trampolines.step(pid, a, leaf, regs.sp(), &mut |x| read(x).ok())).flatten();
            let ret = match step {
                Some(s) => {
                    regs.set_sp(s.sp);
                    Some(s.ret)
                }
                None => p.unwinder.unwind_frame(addr, &mut regs, &mut p.cache, &mut { read }).ok().flatten(),
            };
            match ret.and_then(FrameAddress::from_return_address) {
                Some(next) => addr = next,
                None => break,
            }
        }
        if out.is_empty() {
            out.push(ip);
        }
        out.reverse();
        out
    }

    /// The Maps record of a process, when its mappings were read.
    pub fn maps_record(&self, pid: u32) -> Option<Maps> {
        let p = self.procs.get(&pid)?;
        let mut maps = p.maps.clone();
        // Before-exec mappings, where they do not collide with the current ones.
        for old in self.retired.get(&pid).into_iter().flatten() {
            if !p.maps.iter().any(|m| m.start < old.end && old.start < m.end) {
                maps.push(old.clone());
            }
        }
        maps.sort_by_key(|m| m.start);
        Some(Maps { pid, maps, names: self.python.names(pid) })
    }

    /// The Maps record of every process whose mappings were read, by pid.
    pub fn maps_records(&self) -> Vec<Maps> {
        let mut pids: Vec<u32> = self.procs.keys().copied().collect();
        pids.sort_unstable();
        pids.into_iter().filter_map(|pid| self.maps_record(pid)).collect()
    }
}
