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
//! Where the kernel's mmap records can be read (mmaplog), the mappings are
//! those the process had at the time of each stack (images.rs), /proc only
//! for what was mapped before the capture.

use std::collections::HashMap;
use std::sync::Arc;

use crate::arch::{leaf_regs, ArchUnwinder, Cache, FramePointer, Regs};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};
use object::{Object, ObjectSection, ObjectSegment};
use wallclock_stream::{MapEntry, Maps};

use crate::elf::Bytes;
use crate::event::WcEvent;
use crate::leafscan::{Code, FileCode};
use crate::textpages::{Pages, Text};
use crate::runtimes::{At, Runtimes, Step, Unwound, MIN_CODE_ADDR};

#[path = "reap.rs"]
mod reap;
#[path = "images.rs"]
mod images;

const MAX_FRAMES: usize = 256;

/// Bytes of an entry point that count as its function: `_start` calls
/// the loader's or libc's first function within its first few
/// instructions.
const ENTRY_LEN: u64 = 64;

pub use crate::runtimes::splice::TRUNCATED_ADDR;
/// Its name: what lies rootward of it is unknown. Frames read otherwise
/// (Python's) go rootward of it; the native frames leafward are exact.
pub const TRUNCATED: &str = "[truncated]";

/// Unwind data of one ELF file, shared by every process that maps it.
struct FileInfo {
    /// The file as mapped, and opened (for `Text`), where it is (not the vDSO).
    map: Option<Arc<memmap2::Mmap>>,
    file: Option<Arc<std::fs::File>>,
    build_id: Option<String>,
    /// Bytes of the image (the vDSO's, whose mapping must be as long).
    len: usize,
    /// (p_offset, p_vaddr, p_filesz) of each PT_LOAD segment.
    segments: Vec<(u64, u64, u64)>,
    sections: Option<ExplicitModuleSectionInfo<Bytes>>,
    /// (start, end) SVMAs of the functions a stack starts in (Go's, and
    /// the entry point).
    roots: Vec<(u64, u64)>,
    /// What the leaf scan checks (leafscan).
    code: Option<Arc<FileCode>>,
}

fn load_file(path: &str) -> Option<FileInfo> {
    if path == "[vdso]" {
        return parse_elf(&Bytes::Owned(Arc::from(vdso_image()?)));
    }
    if !path.starts_with('/') {
        return None;
    }
    let data = Bytes::mapped(crate::elf::map_file(path)?);
    let mut fi = parse_elf(&data)?;
    if let Bytes::Mapped(map, _) = data {
        fi.map = Some(map);
    }
    fi.file = crate::elf::open_file(path).map(Arc::new);
    Some(fi)
}

/// The vDSO's image. The kernel maps one image into every 64-bit process:
/// ours stands for the target's (same length, checked in `add_maps`).
/// Without its unwind table some samples inside `clock_gettime`'s vDSO
/// code lost every caller (about 1% of a clock-reading loop's samples).
fn vdso_image() -> Option<Vec<u8>> {
    // SAFETY: getauxval has no preconditions.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    let me = wallclock_stream::procmaps::read(std::process::id())?;
    let m = me.iter().find(|m| m.entry.path == "[vdso]" && m.entry.start == base)?;
    let len = (m.entry.end - m.entry.start) as usize;
    // SAFETY: our own [vdso] mapping, readable, mapped for the life of
    // the process; copied out at once.
    Some(unsafe { std::slice::from_raw_parts(base as *const u8, len) }.to_vec())
}

fn parse_elf(data: &Bytes) -> Option<FileInfo> {
    let obj = object::File::parse(&data[..]).ok()?;
    let build_id = obj.build_id().ok().flatten().map(|b| b.iter().map(|x| format!("{x:02x}")).collect());
    let segments = obj
        .segments()
        .map(|s| {
            let (off, size) = s.file_range();
            (off, s.address(), size)
        })
        .collect();
    let sect = |name: &str| -> (Option<std::ops::Range<u64>>, Option<Bytes>) {
        match obj.section_by_name(name) {
            Some(s) => (Some(s.address()..s.address() + s.size()), s.file_range().and_then(|(o, n)| data.sub(o, n))),
            None => (None, None),
        }
    };
    let (text_svma, text) = sect(".text");
    let (eh_frame_svma, eh_frame) = sect(".eh_frame");
    let (eh_frame_hdr_svma, eh_frame_hdr) = sect(".eh_frame_hdr");
    let (got_svma, _) = sect(".got");
    // Go binaries have no .eh_frame but a .debug_frame, compressed
    // (SHF_COMPRESSED): handed over compressed, framehop found no table
    // and walked frame pointers from the leaf, which loses every caller
    // of code that uses rbp as a register (crypto/sha256.block).
    let debug_frame = obj.section_by_name(".debug_frame").and_then(|s| section_bytes(&s)).map(|b| Bytes::Owned(Arc::from(b)));
    let (eh_frame_svma_start, eh_frame_bytes) = (eh_frame_svma.as_ref().map(|r| r.start), eh_frame.clone());
    let (hdr_svma_start, hdr_bytes) = (eh_frame_hdr_svma.as_ref().map(|r| r.start), eh_frame_hdr.clone());
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
    let mut roots = if obj.section_by_name(".gopclntab").is_some() { go_roots(&obj) } else { Vec::new() };
    // The entry point (`_start`) begins the main thread's stack. Needed
    // for the loader's: its `_start` has no unwind rule and no symbol,
    // and a sample in the loader at startup would otherwise be cut short.
    if obj.entry() != 0 {
        roots.push((obj.entry(), obj.entry() + ENTRY_LEN));
    }
    let tables = match (eh_frame_svma_start, eh_frame_bytes, hdr_svma_start, hdr_bytes) {
        (Some(a), Some(e), Some(b), Some(h)) => Some(crate::leafscan::Tables { eh_frame: (a, e), hdr: (b, h) }),
        _ => None,
    };
    let code = FileCode::parse(&obj, tables).map(Arc::new);
    Some(FileInfo { map: None, file: None, build_id, len: data.len(), segments, sections, roots, code })
}

/// Where Go's stacks begin, as Go's own traceback stops there: a
/// goroutine's first frame returns to `runtime.goexit` (a return address
/// planted on its fresh stack, with whatever lies above it), a thread's
/// scheduler stack (g0) begins in `runtime.mstart` (called from
/// `rt0_go` on the main thread, from `runtime.clone` or, with cgo, from
/// C through `crosscall_amd64`: neither leaves a frame to unwind).
fn go_roots(obj: &object::File) -> Vec<(u64, u64)> {
    use object::ObjectSymbol;
    const ROOTS: [&str; 3] = ["runtime.goexit", "runtime.mstart", "runtime.rt0_go"];
    obj.symbols()
        .filter(|s| s.name().is_ok_and(|n| ROOTS.contains(&n.strip_suffix(".abi0").unwrap_or(n))))
        .map(|s| (s.address(), s.address() + s.size().max(1)))
        .collect()
}

/// A section's bytes, inflated when zlib-compressed (SHF_COMPRESSED, as
/// Go's linker writes its DWARF).
fn section_bytes(s: &object::Section) -> Option<Vec<u8>> {
    use std::io::Read;
    let c = s.compressed_data().ok()?;
    match c.format {
        object::CompressionFormat::None => Some(c.data.to_vec()),
        object::CompressionFormat::Zlib => {
            let mut out = Vec::with_capacity(c.uncompressed_size as usize);
            flate2::read::ZlibDecoder::new(c.data).read_to_end(&mut out).ok()?;
            Some(out)
        }
        _ => None,
    }
}

struct Proc {
    /// Identity (device, inode) of the executable the maps belong to: an
    /// exec replaces every mapping, so the old ones must not linger.
    exe: Option<(u64, u64)>,
    /// The image of the mmap log (`mmaplog::Gen::since`) the maps are of,
    /// when they come from there.
    since: Option<u64>,
    /// Which process of its pid it is (`pgen`: the pid used again within
    /// the capture; see [`Unwind::rebirth`]).
    pgen: u32,
    /// By the log, it has no executable memory outside its files.
    no_anon_code: bool,
    maps: Vec<MapEntry>,
    /// AVMA ranges of the functions a stack begins in (`go_roots`).
    roots: Vec<(u64, u64)>,
    /// Each file's code, for the leaf scan's checks.
    code: Code,
    unwinder: ArchUnwinder<Bytes>,
    cache: Cache,
}

impl Proc {
    fn new(exe: Option<(u64, u64)>) -> Proc {
        Proc { exe, since: None, pgen: 0, no_anon_code: false, maps: Vec::new(), roots: Vec::new(), code: Code::default(), unwinder: ArchUnwinder::new(), cache: Cache::new() }
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
    /// Mappings of the processes that exited (see `reap`), with their
    /// `pgen`.
    gone: HashMap<u32, (u32, Vec<MapEntry>)>,
    /// Maps records of the earlier processes of a pid used again, made
    /// when the next one's first stack came (see [`Unwind::rebirth`]),
    /// where there is no spool to take them.
    older: Vec<Maps>,
    reaper: reap::Reaper,
    /// Code the leaf scan read.
    pages: Pages,
    /// Reloads of /proc/PID/maps after an address outside every mapping,
    /// per image.
    reloads: HashMap<u32, u32>,
    /// Inode of the executable each pid ran at its last exec event.
    exec_ino: HashMap<u32, u64>,
    /// The runtime readers (runtimes/): frames of JIT code walked, of
    /// interpreters read and spliced in, named.
    pub runtimes: Runtimes,
    /// The frame pointer of each frame of the stack last unwound (root
    /// first, 0 where unknown).
    fps: Vec<u64>,
    /// Processes with a stack cut short (their Maps record names
    /// [`TRUNCATED_ADDR`]).
    truncated: HashMap<u32, u32>,
    /// Where the Maps records of exited processes go, when the tool takes
    /// them at the stop from a spool instead of `gone` (see `reap`).
    gone_spool: Option<crate::spool::Spool>,
    /// A write to it failed: it keeps what it took, the rest stays here.
    gone_spool_failed: bool,
    /// The kernel's records of every mapping made (see mmaplog): the maps
    /// of a process at the time of its stack, not at the time /proc is
    /// read (when there is none, /proc alone).
    log: Option<crate::mmaplog::MmapLog>,
    /// The time of the stack event being unwound (None: now).
    at: Option<u64>,
    /// The latest time of a stack event handled.
    last_ts: u64,
}

fn exe_identity(pid: u32) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(format!("/proc/{pid}/exe")).ok()?;
    Some((m.dev(), m.ino()))
}

pub(crate) fn parse_maps(pid: u32) -> Vec<MapEntry> {
    crate::mmaplog::code_files(wallclock_stream::procmaps::read(pid).unwrap_or_default())
}


/// Frames from `addr` with `regs` (leaf first), and whether the walk
/// reached the stack's start (see `Unwind::unwind_known`). `fps` gets
/// each frame's frame pointer (V8's frames hold their function there).
#[allow(clippy::too_many_arguments)]
fn walk(p: &mut Proc, rt: &mut Runtimes, pid: u32, mut addr: FrameAddress, regs: &mut Regs, sp: u64, stack: &[u8], fps: &mut Vec<u64>) -> (Vec<u64>, bool) {
    let read = |a: u64| -> Result<u64, ()> {
        let off = a.checked_sub(sp).ok_or(())? as usize;
        let b = stack.get(off..off + 8).ok_or(())?;
        Ok(u64::from_le_bytes(b.try_into().unwrap()))
    };
    let mut out = Vec::new();
    loop {
        let a = addr.address();
        // Below vm.mmap_min_addr no code can be mapped: not a return
        // address but a data word read as one (argc, when _start had no
        // rule: now it ends the stack as the entry point).
        if a < MIN_CODE_ADDR {
            return (out, false);
        }
        out.push(a);
        fps.push(regs.frame_pointer());
        if out.len() >= MAX_FRAMES {
            return (out, false);
        }
        let lookup = addr.address_for_lookup();
        if p.roots.iter().any(|&(s, e)| lookup >= s && lookup < e) {
            return (out, true);
        }
        // Code outside every file mapping may be a CPython trampoline;
        // other such code (a JIT's) is walked by its frame pointers,
        // framehop's rule for an address in no module.
        let anon = !p.maps.iter().any(|m| a >= m.start && a < m.end);
        // A caller outside every file of a process with no other code: a
        // data word taken for one (a stack cut in JIT code, for stacksym,
        // in a C program: `_dl_runtime_resolve_xsavec`'s realigned frame).
        if anon && p.no_anon_code && addr.is_return_address() && !special_code(pid, a) {
            out.pop();
            fps.pop();
            return (out, false);
        }
        let leaf = !addr.is_return_address();
        // A runtime's JIT code (HotSpot's) or CPython's trampolines.
        if anon {
            let in_files = |x: u64| p.maps.iter().any(|m| x >= m.start && x < m.end);
            match rt.step(pid, At { pc: a, leaf, sp: regs.sp(), bp: regs.frame_pointer() }, &|x| read(x).ok(), &in_files) {
                Step::NotMine => {}
                Step::Frame { ret, sp, bp, name } => {
                    if let Some(n) = name {
                        *out.last_mut().unwrap() = n;
                    }
                    regs.set_sp(sp);
                    regs.set_frame_pointer(bp);
                    match FrameAddress::from_return_address(ret) {
                        Some(next) => addr = next,
                        None => return (out, true),
                    }
                    continue;
                }
                Step::Stop(name) => {
                    if let Some(n) = name {
                        *out.last_mut().unwrap() = n;
                    }
                    return (out, false);
                }
            }
        }
        let fp = regs.frame_pointer();
        match p.unwinder.unwind_frame(addr, regs, &mut p.cache, &mut { read }) {
            Ok(Some(r)) => {
                crate::arch::past_v8_entry_frame(fp, regs, read);
                match FrameAddress::from_return_address(r) {
                    Some(next) => addr = next,
                    None => return (out, true),
                }
            }
            Ok(None) => {
                if let Some(root) = chain_end_caller(p, regs, &read) {
                    out.push(root);
                    fps.push(0);
                }
                return (out, true);
            }
            Err(_) => return (out, false),
        }
    }
}

/// arm64: the caller of the frame where framehop ended the walk, when
/// that frame's own record ends the chain of frame records (AAPCS64: a
/// saved frame pointer of 0). framehop ends there without that record's
/// return address, which is in the stack's first function: glibc's
/// thread_start (in clone3) and _start zero x29 before they call
/// start_thread and __libc_start_main. The record is the two words at
/// the frame pointer; its return address must lie in a file's code.
/// x86-64 ends its walks at the root's own rule: nothing to add.
fn chain_end_caller(p: &Proc, regs: &Regs, read: &impl Fn(u64) -> Result<u64, ()>) -> Option<u64> {
    if !cfg!(target_arch = "aarch64") {
        return None;
    }
    let fp = regs.frame_pointer();
    if fp == 0 || read(fp).ok()? != 0 {
        return None;
    }
    // Without a pointer-authentication hash (the bits above 48).
    let ret = read(fp.checked_add(8)?).ok()? & (u64::MAX >> 16);
    (ret >= MIN_CODE_ADDR && p.maps.iter().any(|m| ret >= m.start && ret < m.end)).then_some(ret)
}

/// Whether `a` lies in executable memory of `pid` as /proc shows it now,
/// though the kernel's mmap records named none there: `[uprobes]`, where a
/// uretprobe (a span's exit, or another tool's) puts the return address of
/// the function it watches, is made without such a record (and a lost
/// record would leave a file out). Read only on the rare path where a
/// caller is about to be taken for a data word; a process gone by then
/// has nothing to show, and the word is taken for data.
fn special_code(pid: u32, a: u64) -> bool {
    let Some(maps) = wallclock_stream::procmaps::read(pid) else { return false };
    maps.iter().any(|m| m.executable() && a >= m.entry.start && a < m.entry.end)
}

impl Unwind {
    pub fn new() -> Self {
        Self::default()
    }

    fn add_maps(&mut self, proc: &mut Proc, maps: Vec<MapEntry>) {
        for mut m in maps {
            if proc.maps.iter().any(|o| o.start == m.start && o.path == m.path) {
                continue;
            }
            let fi = self.files.entry(m.path.clone()).or_insert_with(|| load_file(&m.path));
            let vdso = m.path == "[vdso]";
            if let Some(fi) = fi.as_ref().filter(|fi| !vdso || fi.len as u64 == m.end - m.start) {
                // The Maps record names the vDSO as before (stacksym
                // reads it from the live process), by path alone.
                if !vdso {
                    m.build_id = fi.build_id.clone();
                }
                if let Some(base_avma) = crate::elf::load_bias(&fi.segments, m.start, m.offset) {
                    let root = fi.roots.iter().map(|&(a, b)| (a.wrapping_add(base_avma), b.wrapping_add(base_avma)));
                    proc.roots.extend(root.filter(|&(a, _)| a >= m.start && a < m.end));
                    let text = fi.sections.as_ref().and_then(|s| Some((s.text.clone()?, s.text_svma.clone()?)));
                    if let (Some((t, svma)), Some(c)) = (text, fi.code.clone()) {
                        let start = svma.start.wrapping_add(base_avma);
                        let text = match (t, &fi.file) {
                            (Bytes::Mapped(_, r), Some(f)) => Text::File(f.clone(), r.start as u64, r.len() as u64),
                            (t, _) => Text::Mem(t),
                        };
                        if start >= m.start && start < m.end {
                            proc.code.add(base_avma, c, text);
                        }
                    }
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

    /// Whether a user stack of `pid` just unwound (root first) was cut
    /// short or has a frame in code outside every file that no reader
    /// named (JIT code, framed by its frame pointer): a reader that
    /// learns the process later (`Runtimes::epoch`) may read it otherwise.
    pub fn unread_frames(&self, pid: u32, v: &[u64]) -> bool {
        v.iter().any(|&a| a == TRUNCATED_ADDR || (a < wallclock_stream::NAMED_ADDR_BASE && !self.covered(pid, a)))
    }

    /// User stack, root first: the leaf is `ip`, the others return
    /// addresses. No link register: see [`Unwind::unwind_lr`].
    pub fn unwind(&mut self, pid: u32, ip: u64, sp: u64, bp: u64, stack: &[u8]) -> Vec<u64> {
        self.unwind_lr(pid, ip, sp, bp, 0, stack)
    }

    /// As [`Unwind::unwind`], with arm64's link register at the leaf (its
    /// caller, until the leaf saves it); 0 where unknown, and on x86-64.
    pub fn unwind_lr(&mut self, pid: u32, ip: u64, sp: u64, bp: u64, lr: u64, stack: &[u8]) -> Vec<u64> {
        if ip == 0 {
            return Vec::new();
        }
        if !self.covered(pid, ip) {
            self.reload(pid);
        }
        // As of this stack (a JIT may have made code since), and only once
        // the maps are current (below): before, a library not yet read
        // is outside them too.
        let no_anon = match (self.log.as_ref(), self.procs.get_mut(&pid)) {
            (Some(log), Some(p)) => {
                p.no_anon_code = false;
                p.since.is_some() && log.gen_at(pid, self.at.unwrap_or(u64::MAX)).is_some_and(|g| g.exact && !g.anon_code)
            }
            _ => false,
        };
        let (v, whole) = self.unwind_known(pid, ip, sp, bp, lr, stack, false);
        // A caller outside every known mapping: a library mapped since the
        // last read of the maps (libc itself, when they were read just
        // after exec, before the loader mapped it; or a dlopen). Read them
        // again, once per miss. `v` is root first: every frame but the
        // leaf (checked above). Skipping the root instead kept a missing
        // libc unknown while the process ran code of its own: every stack
        // then ended at the first libc frame (`__libc_start_call_main`,
        // `start_thread`) without `_start` or `clone3` above it.
        // The maps are then current, and the leaf's caller may be looked
        // for by a scan (`unwind_known`) even past such a frame.
        let (mut v, whole) = if v.len() > 1 && !v[..v.len() - 1].iter().all(|&a| self.covered(pid, a) || self.runtimes.is_code(pid, a)) {
            self.reload(pid);
            if let Some(p) = self.procs.get_mut(&pid) {
                p.no_anon_code = no_anon;
            }
            self.unwind_known(pid, ip, sp, bp, lr, stack, true)
        } else {
            (v, whole)
        };
        self.runtimes.end_stack();
        if !whole {
            v.insert(0, TRUNCATED_ADDR);
            self.fps.insert(0, 0);
            self.cut(pid);
        }
        v
    }

    /// A stack of `pid` (as of the one being unwound) was cut short: its
    /// Maps record names [`TRUNCATED_ADDR`], the record of that process
    /// of the pid when there is no other.
    fn cut(&mut self, pid: u32) {
        let pgen = self.pgen_now(pid);
        self.truncated.insert(pid, pgen);
    }

    /// The user stack of a stack event, root first: unwound, with the
    /// Python frames it carries put where the interpreter ran them.
    pub fn event_stack(&mut self, e: &WcEvent) -> Vec<u64> {
        self.rebirth(e.pid, e.ts);
        self.at = Some(e.ts);
        self.last_ts = self.last_ts.max(e.ts);
        let mut native = if e.ip != 0 && images::in_exec(e) && self.mid_exec(e.pid, e.ip) {
            self.cut(e.pid);
            vec![TRUNCATED_ADDR, e.ip]
        } else {
            let stack = self.runtimes.stack(e);
            let v = self.unwind_lr(e.pid, e.ip, e.sp, e.bp, e.lr, &stack);
            self.runtimes.recycle(stack);
            v
        };
        self.at = None;
        if native.first() == Some(&TRUNCATED_ADDR) && images::not_started(e) {
            // Its one frame: `clone3`'s child side has no unwind rule, and
            // a word of the new stack was read as its caller (make's
            // posix_spawn child: `[unknown]+0x5920090720;clone3`).
            native = vec![e.ip];
        }
        self.name_frames(e.pid, e.ts, &mut native, e.sp, e.ustack_bytes());
        let maps = self.procs.get(&e.pid).map_or(&[][..], |p| &p.maps[..]);
        let in_file = |a: u64| maps.iter().any(|m| a >= m.start && a < m.end);
        let v = self.runtimes.splice(e, native, in_file);
        // A run of interpreter frames whose native frame the unwind lost
        // is a cut.
        if v.contains(&TRUNCATED_ADDR) {
            self.at = Some(e.ts);
            self.cut(e.pid);
            self.at = None;
        }
        v
    }

    /// [`Unwind::unwind`] with V8's and Erlang's frames named, as
    /// [`Unwind::event_stack`] names them: for one stack read outside a
    /// capture (wcdump), `ts` its CLOCK_MONOTONIC time.
    /// `lr`: arm64's link register (0 on x86-64).
    #[allow(clippy::too_many_arguments)]
    pub fn unwind_named(&mut self, pid: u32, ts: u64, ip: u64, sp: u64, bp: u64, lr: u64, stack: &[u8]) -> Vec<u64> {
        let mut native = self.unwind_lr(pid, ip, sp, bp, lr, stack);
        self.name_frames(pid, ts, &mut native, sp, stack);
        native
    }

    /// Names the frames of `native`, just unwound, that a runtime names
    /// in place (V8's, BEAM's; the frame pointers the unwind kept, `fps`,
    /// say where each frame's slots are). A reader whose frames went on
    /// past the copy of the stack has it marked cut.
    fn name_frames(&mut self, pid: u32, ts: u64, native: &mut Vec<u64>, sp: u64, stack: &[u8]) {
        let mut cut = false;
        if self.fps.len() == native.len() {
            let maps = self.procs.get(&pid).map_or(&[][..], |p| &p.maps[..]);
            let mut s = Unwound { pid, ts, native, fps: &self.fps, copy: (sp, stack), maps, cut: false };
            self.runtimes.name_frames(&mut s);
            cut = s.cut;
        }
        self.fps.clear();
        if cut {
            native.insert(0, TRUNCATED_ADDR);
            let at = self.at.replace(ts);
            self.cut(pid);
            self.at = at;
        }
    }

    fn reload(&mut self, pid: u32) -> bool {
        // The cap bounds the reads of /proc. The log's maps are in memory
        // and, taken as of each stack's time, must be taken again for a
        // library mapped since: capped, a Python importing its modules
        // (and each stack through its -X perf trampolines, outside every
        // file) used the 64 up early, and its later stacks were walked
        // without libpython (a stale word then taken for the caller).
        let logged = self.log.as_ref().and_then(|l| l.gen_at(pid, self.at.unwrap_or(u64::MAX))).is_some_and(|g| g.exact);
        let n = self.reloads.entry(pid).or_default();
        if *n >= 64 && !logged {
            return false;
        }
        *n += 1;
        let before = self.procs.get(&pid).map_or(0, |p| p.maps.len());
        self.refresh(pid);
        self.procs.get(&pid).is_some_and(|p| p.maps.len() > before)
    }

    /// The stack root first, and whether it is whole: it ended where a
    /// stack ends (an unwind table's end, `clone3` and `_start` say so; a
    /// zero frame pointer or return address; a Go root function, an entry
    /// point), not at a frame it could not step past (the copy of the
    /// stack ran out, no rule, an address in no mapping).
    ///
    /// The scan for a leaf's caller runs only once the maps are known to
    /// be current (`maps_current`), or when the walk met no address
    /// outside them: a library the loader mapped after the maps were read
    /// (libc, right after exec) fails the walk too, and a scan then took
    /// the one known return address, `_start`'s, as the leaf's caller
    /// (`_start;clock_gettime` for a third of a program's samples).
    #[allow(clippy::too_many_arguments)]
    fn unwind_known(&mut self, pid: u32, ip: u64, sp: u64, bp: u64, lr: u64, stack: &[u8], maps_current: bool) -> (Vec<u64>, bool) {
        let Some(p) = self.procs.get_mut(&pid) else { return (vec![ip], false) };
        let rt = &mut self.runtimes;
        let pages = &mut self.pages;
        let first = FrameAddress::from_instruction_pointer(ip);
        let mut fps = Vec::new();
        let (mut out, whole) = walk(p, rt, pid, first, &mut leaf_regs(ip, sp, bp, lr), sp, stack, &mut fps);
        // A leaf in a file whose table does not cover it (hand-written
        // assembly: OpenBLAS's dgemm_kernel_HASWELL, 7% of a matmul
        // thread) gets a guessed rule that reads a data word as its
        // caller. Its caller is then looked for as Breakpad's stack walker
        // does, above sp: a word that returns just past a call
        // instruction, taken only when the walk from it reaches the
        // stack's start (stale return addresses of earlier calls lie in
        // the leaf's frame too) through code in files.
        let in_maps = |p: &Proc, a: u64| p.maps.iter().any(|m| a >= m.start && a < m.end);
        // Only where the leaf has no rule: one with a rule was stepped
        // past as its table says, and a walk stopped further up (at JIT
        // code) is cut there, not joined to a stale word (leafscan.rs).
        // x86-64's call instructions only: an arm64 leaf has its caller
        // in the link register.
        if cfg!(target_arch = "x86_64") && (!whole || out.len() == 1) && p.code.in_text(ip) && p.code.has_rule(ip) != Some(true) && (maps_current || out.iter().skip(1).all(|&a| in_maps(p, a))) {
            for (slot, r) in p.code.scan(pid, ip, sp, stack, pages) {
                let Some(next) = FrameAddress::from_return_address(r) else { continue };
                let mut regs = leaf_regs(r, slot + 8, bp, 0);
                let mut caller_fps = Vec::new();
                let (callers, w) = walk(p, rt, pid, next, &mut regs, sp, stack, &mut caller_fps);
                // Whole, and through files only: a stale word can lead
                // into anonymous memory, where a zero frame pointer ends
                // any walk.
                if w && callers.iter().all(|&a| in_maps(p, a)) {
                    out = callers;
                    out.insert(0, ip);
                    out.reverse();
                    caller_fps.insert(0, bp);
                    caller_fps.reverse();
                    self.fps = caller_fps;
                    return (out, true);
                }
            }
        }
        out.reverse();
        fps.reverse();
        self.fps = fps;
        (out, whole)
    }

    /// The runtime readers' cost counters and counts, for the stats trailer (runtimes/),
    /// and the user-space stack copies of an older kernel (event.rs).
    pub fn reader_stats(&self) -> Vec<(String, u64)> {
        let mut v = self.runtimes.stats();
        v.extend(crate::event::WcEvent::user_copy_stats());
        v
    }

    /// The Maps record of a process, when its mappings were read.
    pub fn maps_record(&self, pid: u32) -> Option<Maps> {
        // A stack cut short names TRUNCATED_ADDR, whether or not any
        // mapping of its process was known.
        let none = Vec::new();
        let (pgen, cur) = match self.procs.get(&pid).map(|p| (p.pgen, &p.maps)).or_else(|| self.gone.get(&pid).map(|(g, m)| (*g, m))) {
            Some(c) => c,
            None => match self.truncated.get(&pid) {
                Some(&g) => (g, &none),
                None => return None,
            },
        };
        let mut maps = cur.clone();
        // Before-exec mappings, where they do not collide with the current ones.
        for old in self.retired.get(&pid).into_iter().flatten() {
            if !cur.iter().any(|m| m.start < old.end && old.start < m.end) {
                maps.push(old.clone());
            }
        }
        // Files the mmap log saw mapped that no stack ran in (the unwinder
        // never read them): in the record too, by path, so that a module
        // is told apart from another file of its base name the process
        // mapped (40 copies of one extension: with one of them in the
        // stacks, it was named by its base name alone whenever the maps
        // were last read before the others were loaded).
        // Its own process's: the last image before its end.
        let end = self.log.as_ref().and_then(|l| l.end_of(pid, pgen)).unwrap_or(u64::MAX);
        if let Some(g) = self.log.as_ref().and_then(|l| l.gen_at(pid, end)) {
            for (_, m) in &g.maps {
                if !m.path.starts_with('/') || maps.iter().any(|o| o.start < m.end && m.start < o.end) {
                    continue;
                }
                maps.push(m.clone());
            }
        }
        maps.sort_by_key(|m| m.start);
        let mut names = self.runtimes.names(pid);
        if self.truncated.contains_key(&pid) {
            names.push(wallclock_stream::NamedAddr { addr: TRUNCATED_ADDR, frame: wallclock_stream::Frame::named(TRUNCATED) });
        }
        Some(Maps { pid, maps, names, pgen: (pgen > 0).then_some(pgen) })
    }

    /// The Maps record of every process whose mappings were read, by pid.
    pub fn maps_records(&self) -> Vec<Maps> {
        let mut pids: Vec<u32> = self.procs.keys().chain(self.gone.keys()).chain(self.truncated.keys()).copied().collect();
        pids.sort_unstable();
        pids.dedup();
        let mut recs = self.older.clone();
        recs.extend(pids.into_iter().filter_map(|pid| self.maps_record(pid)));
        recs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This thread's registers and a copy of its stack up to its
    /// mapping's end (16K at most), as the BPF side takes them.
    #[inline(never)]
    fn own_stack() -> (u64, u64, u64, Vec<u8>) {
        let (ip, sp, bp): (u64, u64, u64);
        // SAFETY: reads three registers, touches no memory.
        unsafe {
            std::arch::asm!("lea {ip}, [rip]", "mov {sp}, rsp", "mov {bp}, rbp", ip = out(reg) ip, sp = out(reg) sp, bp = out(reg) bp);
        }
        let maps = wallclock_stream::procmaps::read(std::process::id()).unwrap();
        let end = maps.iter().find(|m| m.entry.start <= sp && sp < m.entry.end).unwrap().entry.end;
        let n = (end - sp).min(16384) as usize;
        // SAFETY: [sp, sp + n) lies in this thread's mapped stack, above
        // (callers' side of) the frame of this function.
        let stack = unsafe { std::slice::from_raw_parts(sp as *const u8, n) }.to_vec();
        (ip, sp, bp, stack)
    }

    /// The maps read before the loader mapped libc (exec, then the first
    /// read): a stack whose own code is known but whose callers are in
    /// libc stops at the first libc frame, its root. That frame, unknown,
    /// must make the maps be read again, and the stack reach clone3.
    #[test]
    fn a_root_frame_in_an_unread_library_reads_the_maps_again() {
        let pid = std::process::id();
        let is_libc = |m: &MapEntry| m.path.contains("/libc.so");
        let (libc, maps): (Vec<MapEntry>, Vec<MapEntry>) = parse_maps(pid).into_iter().partition(is_libc);
        let mut u = Unwind::new();
        let mut p = Proc::new(exe_identity(pid));
        u.add_maps(&mut p, maps);
        u.procs.insert(pid, p);
        let (ip, sp, bp, stack) = own_stack();
        let v = u.unwind(pid, ip, sp, bp, &stack);
        let in_libc = |a: u64| libc.iter().any(|m| a >= m.start && a < m.end);
        // A test's thread: clone3 and start_thread (libc), std's thread
        // start, the test, this function (on the main thread: _start,
        // then two libc frames). Cut at its first libc frame, one.
        assert!(v.len() > 4, "{v:x?}");
        assert!(v.iter().filter(|&&a| in_libc(a)).count() >= 2, "the unwind stopped at its first libc frame: {v:x?}");
        assert!(u.procs[&pid].maps.iter().any(is_libc), "libc was not read");
    }
}
