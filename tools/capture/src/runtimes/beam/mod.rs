//! Erlang (BEAM JIT) frames named with no flag, from the emulator's own
//! tables read in the live process (tables.rs): the functions of its
//! loaded modules and the atoms that name them, `$module:function/arity`
//! as `+JPperf true`'s perf map names them. Debian's `beam.smp` is
//! stripped and exports none of the tables the OpenTelemetry profiler
//! looks up by symbol (`the_active_code_index`, beam_ranges.c's `r`,
//! `erts_atom_table`), so they are found by what they hold.
//!
//! Without `+JPperf` the JIT keeps no frame pointers and an Erlang
//! process runs on a stack of its own (x86-64's BeamAsm: `rsp` is the
//! process's stack pointer): a stack whose leaf is Erlang code has that
//! frame alone. Its callers are the return addresses on the process's
//! stack, the words of the copy taken from `sp` that fall inside a
//! function; the stack ends at the first word in the JIT's code outside
//! every module's function or in the emulator's own (`erts_beamasm`'s
//! `normal_exit/0`, under each process's first call). Other words there are Erlang terms: tagged, never inside
//! the JIT's code. A stack whose end is past the copy is cut.
//!
//! A process found to be no BEAM is looked at again at its exec
//! (attached while `erl` is its shell script); a VM whose tables were not
//! found (caught starting), 250 ms later, and said and given up after 2 s.
//!
//! The tables are read at the first stack in the JIT's code and again
//! (at most once a second) when a leaf falls in none of the functions
//! known (a module loaded since). A module loaded since lies most often
//! right after the last one, in what the table takes for the last
//! module's last function when its end is not known (OTP 25): a frame
//! past such a function's start, or past a function's end, has the code
//! between read for a function's `ErtsCodeInfo` the table lacks
//! (`Proc::func_at`, once per higher address). A process that wrote a
//! perf map (`+JPperf true`) is left to it: its frame pointers give the
//! stacks.

pub mod tables;

use std::collections::HashMap;

use wallclock_stream::{Frame, NamedAddr, NAMED_ADDR_BASE};

use crate::procmem::Mem;
use crate::runtimes::cost::{self, Cost};
use crate::runtimes::{BpfMaps, Runtime, Unwound, MIN_CODE_ADDR};
use tables::{Func, Info};

/// The stacks' clock between two reads of a process's functions.
const RESCAN_NS: u64 = 1_000_000_000;
/// A VM whose tables were not found is looked at again this long after
/// (each look reads its maps, data and JIT code): the Erlang frames of
/// the stacks in between stay unnamed.
const RETRY_NS: u64 = 250_000_000;
/// Found unreadable for the same reason this long: said, and given up.
const GIVE_UP_NS: u64 = 2_000_000_000;
/// Frames taken from an Erlang process's stack at most.
const MAX_FRAMES: usize = 256;
/// The JIT's code is read in pieces of this size.
const CHUNK: usize = 1 << 20;

struct Proc {
    mem: Mem,
    /// The JIT's executable mappings (`/memfd:vmem`, `r-x`): start, end
    /// and offset in the memfd.
    code: Vec<(u64, u64, u64)>,
    /// The functions' infos as read, and the functions they make.
    infos: Vec<Info>,
    funcs: Vec<Func>,
    /// Function start -> the highest address found to have no other
    /// function's info between it and that start (see `func_at`).
    checked: HashMap<u64, u64>,
    /// Functions `func_at` found.
    late: u64,
    atom_table: u64,
    scanned: u64,
    atoms: HashMap<u64, Option<String>>,
    /// Function start -> its named address.
    addr: HashMap<u64, u64>,
    names: Vec<NamedAddr>,
    shared: Option<u64>,
}

/// A process found not to be a BEAM to read.
struct NotBeam {
    /// Found so for this reason since, and last looked at.
    since: u64,
    last: u64,
    /// Why: None when no BEAM at all.
    why: Option<String>,
}

/// Frames named, and Erlang stacks whose end was past the copy.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub named: u64,
    pub cut: u64,
}

#[derive(Default)]
pub struct Beam {
    procs: HashMap<u32, Proc>,
    /// Processes found to be no BEAM to read. One that is none (attached
    /// while it is still `erl`'s shell script or `erlexec`) is looked at
    /// again at its exec; a VM still starting (no JIT code mapped yet),
    /// [`RETRY_NS`] later.
    not_beam: HashMap<u32, NotBeam>,
    pub counts: Counts,
    /// Time naming frames, and the stacks named (cost.rs).
    pub cost: Cost,
}

/// The name a frame of the emulator's shared JIT code gets (its
/// fragments: garbage collection, message passing, BIF calls), code in
/// no module's function.
pub const SHARED: &str = "[BEAM JIT shared code]";

impl Runtime for Beam {
    fn name(&self) -> &'static str {
        "beam"
    }

    fn cost(&self) -> Cost {
        self.cost
    }

    /// Name the Erlang frames of the stack, and when the leaf is Erlang
    /// code with no caller in a file, put the process's callers above it
    /// from the copy of its stack (from `sp`); the stack is cut when the
    /// Erlang stack went on past the copy.
    fn name_frames(&mut self, s: &mut Unwound<'_>) {
        let maps = s.maps;
        let anon = |a: u64| a > MIN_CODE_ADDR && !maps.iter().any(|m| a >= m.start && a < m.end);
        if !self.name_stack(s.pid, s.ts, s.native, s.copy.1, anon) {
            s.cut = true;
        }
    }

    /// 1 once the VM's tables are read: its stacks copied before then (a
    /// VM caught starting) are copied and named again.
    fn epoch(&self, pid: u32) -> u32 {
        u32::from(self.procs.contains_key(&pid))
    }

    /// A new image: what was read of `pid`, or found it not to be, is
    /// of the old one.
    fn at_exec(&mut self, pid: u32, _maps: &BpfMaps<'_>) -> bool {
        self.procs.remove(&pid);
        self.not_beam.remove(&pid);
        false
    }

    fn names(&self, pid: u32) -> Vec<NamedAddr> {
        self.procs.get(&pid).map(|p| p.names.clone()).unwrap_or_default()
    }

    /// `beam_late_functions`: functions found at a frame, in code
    /// loaded since the last read of the whole (`Proc::func_at`).
    fn stats(&self) -> Vec<(String, u64)> {
        if self.procs.is_empty() {
            return Vec::new();
        }
        vec![("beam_late_functions".into(), self.procs.values().map(|p| p.late).sum())]
    }
}

impl Beam {
    /// [`Runtime::name_frames`] for the stack `native` (root first) and
    /// the copy of its stack; `anon`: whether an address is outside every
    /// file. Returns false when the Erlang stack went past the copy.
    fn name_stack(&mut self, pid: u32, ts: u64, native: &mut Vec<u64>, stack: &[u8], anon: impl Fn(u64) -> bool) -> bool {
        // A process not yet looked at is when a frame is outside every
        // file the unwinder knows (memfd's are none).
        let unseen = !self.procs.contains_key(&pid);
        if native.is_empty() || cost::off("beam") || unseen && !native.iter().any(|&a| a < NAMED_ADDR_BASE && anon(a)) {
            return true;
        }
        if unseen && self.not_beam.get(&pid).is_some_and(|n| ts.saturating_sub(n.last) < RETRY_NS) {
            return true;
        }
        if let std::collections::hash_map::Entry::Vacant(v) = self.procs.entry(pid) {
            let why = match find(pid) {
                Ok(Some(p)) => {
                    self.not_beam.remove(&pid);
                    v.insert(p);
                    None
                }
                Ok(None) => Some(None),
                Err(why) => Some(Some(why)),
            };
            if let Some(why) = why {
                let since = match self.not_beam.get(&pid) {
                    Some(n) if n.why == why => n.since,
                    _ => ts,
                };
                // No BEAM: looked at again at its exec. Tables not found:
                // said when the same is found for GIVE_UP_NS (a VM caught
                // starting has them by then); then looked at no more.
                let given_up = why.is_none() || ts.saturating_sub(since) >= GIVE_UP_NS;
                if let Some(w) = why.as_ref().filter(|_| given_up) {
                    let tool = std::env::args().next().unwrap_or_default();
                    let tool = tool.rsplit('/').next().unwrap_or("capture").to_string();
                    eprintln!("{tool}: warning: pid {pid} (Erlang/BEAM): {w}: its Erlang functions are not read from its code tables (the capture reads OTP 25-29's BeamAsm on x86-64); `erl +JPperf true` names them through a perf map");
                }
                self.not_beam.insert(pid, NotBeam { since, last: if given_up { u64::MAX } else { ts }, why });
                return true;
            }
        }
        let t0 = cost::now();
        let p = self.procs.get_mut(&pid).unwrap();
        let leaf = *native.last().unwrap();
        // Past the emulator's own code (before the first module's) and in
        // no function: a module loaded since the last read.
        let after_first = p.funcs.first().is_some_and(|f| leaf > f.start);
        if p.in_code(leaf) && after_first && tables::lookup(&p.funcs, leaf).is_none() && ts.saturating_sub(p.scanned) >= RESCAN_NS {
            p.scan(ts);
        }
        let last = native.len() - 1;
        let mut named = 0;
        for (i, a) in native.iter_mut().enumerate() {
            if *a >= NAMED_ADDR_BASE || !p.in_code(*a) {
                continue;
            }
            // A return address points past its call.
            let at = if i == last { *a } else { *a - 1 };
            if let Some(n) = p.name_at(at) {
                *a = n;
                named += 1;
            }
        }
        let mut whole = true;
        // An Erlang leaf whose callers were walked by frame pointers the
        // JIT does not keep: any above it outside every file is a stray
        // word (or the cut marker); its callers are on its own stack.
        let stray = native[..last].iter().all(|&a| anon(a) && !p.in_code(a));
        if stray && p.in_code(leaf) {
            let mut callers = Vec::new();
            whole = false;
            for w in stack.chunks_exact(8) {
                let w = u64::from_le_bytes(w.try_into().unwrap());
                if !p.in_code(w) {
                    continue;
                }
                match p.func_at(w - 1) {
                    Some(f) if !p.is_emulator(&f) => callers.push(p.named(&f)),
                    _ => {
                        whole = true;
                        break;
                    }
                }
                if callers.len() >= MAX_FRAMES {
                    break;
                }
            }
            named += callers.len() as u64;
            callers.reverse();
            callers.push(native[last]);
            *native = callers;
            if !whole {
                self.counts.cut += 1;
            }
        }
        self.counts.named += named;
        self.cost.stack(t0);
        whole
    }
}

/// The BEAM of `pid`: Ok(None) when it is none, or wrote a perf map.
fn find(pid: u32) -> Result<Option<Proc>, String> {
    let Some(maps) = wallclock_stream::procmaps::read(pid) else { return Ok(None) };
    let Some(exe) = maps.iter().find(|m| m.entry.path.rsplit('/').next() == Some("beam.smp")) else { return Ok(None) };
    if crate::runtimes::perf_map(pid).is_some() {
        return Ok(None);
    }
    let path = exe.entry.path.clone();
    let file = [format!("/proc/{pid}/root{path}"), path.clone()].into_iter().find(|f| std::fs::metadata(f).is_ok()).ok_or(format!("{path} cannot be read"))?;
    let data = crate::elf::map_file(&file).ok_or(format!("{path} cannot be read"))?;
    let name_off = memchr_str(&data, b"\0atom_tab\0").ok_or(format!("{path} has no \"atom_tab\" string"))? as u64 + 1;
    let segs = segments(&data);
    let vaddr = segs.iter().find(|&&(o, _, n)| name_off >= o && name_off < o + n).map(|&(o, v, _)| v + (name_off - o)).ok_or(format!("{path}: \"atom_tab\" in no segment"))?;
    let first = maps.iter().find(|m| m.entry.path == path && m.entry.offset == 0).ok_or(format!("{path}: its first page is not mapped"))?;
    let bias = crate::elf::load_bias(&segs, first.entry.start, 0).ok_or(format!("{path}: no load address"))?;
    let name_addr = bias + vaddr;
    let mem = Mem { pid };
    // The emulator's data: its writable mappings and the one after (.bss).
    let mut candidates = Vec::new();
    for (k, m) in maps.iter().enumerate() {
        let writable = m.perms.contains('w');
        let beam_data = m.entry.path == path || (k > 0 && maps[k - 1].entry.path == path && m.entry.path.is_empty());
        if !writable || !beam_data || m.entry.end - m.entry.start > 64 << 20 {
            continue;
        }
        let mut buf = vec![0u8; (m.entry.end - m.entry.start) as usize];
        if mem.read(m.entry.start, &mut buf).is_ok() {
            candidates.extend(tables::words_equal(m.entry.start, &buf, name_addr));
        }
    }
    let code: Vec<(u64, u64, u64)> = maps.iter().filter(|m| m.entry.path.starts_with("/memfd:vmem") && m.perms.contains('x')).map(|m| (m.entry.start, m.entry.end, m.entry.offset)).collect();
    if code.is_empty() {
        return Err("no JIT code (/memfd:vmem, executable) mapped".into());
    }
    for c in candidates {
        let mut p = Proc { mem, code: code.clone(), infos: Vec::new(), funcs: Vec::new(), checked: HashMap::new(), late: 0, atom_table: c - tables::ATOM_TABLE_NAME_AT, scanned: 0, atoms: HashMap::new(), addr: HashMap::new(), names: Vec::new(), shared: None };
        if p.atom(0).as_deref() == Some("false") && p.atom(1).as_deref() == Some("true") {
            p.scan(0);
            if p.funcs.is_empty() {
                return Err("no function found in its JIT code".into());
            }
            return Ok(Some(p));
        }
    }
    Err("its atom table was not found".into())
}

impl Proc {
    fn in_code(&self, a: u64) -> bool {
        a < NAMED_ADDR_BASE && self.code.iter().any(|&(s, e, _)| a >= s && a < e)
    }

    /// Read the functions in the JIT's code again: the pages of its memfd
    /// that hold data, read from the file (`/proc/PID/map_files/`), not
    /// the whole mapping through the process's memory. OTP 27+ maps 64 MiB
    /// for a few MiB of code: reading the rest through the mapping
    /// allocated it, zeroed, in the VM (its RSS 52 -> 113 MB after a
    /// capture) and cost the reader 20-50 ms a read. Without the file
    /// (not root), through the mapping as before.
    fn scan(&mut self, ts: u64) {
        self.scanned = ts;
        let mut infos = Vec::new();
        // 40 bytes past each piece, for an ErtsCodeInfo across its edge.
        let mut buf = vec![0u8; CHUNK + 40];
        for &(s, e, off) in &self.code {
            let file = std::fs::File::open(format!("/proc/{}/map_files/{s:x}-{e:x}", self.mem.pid)).ok();
            let spans = match &file {
                Some(f) => data_spans(f, off, off + (e - s)).into_iter().map(|(d, h)| (s + (d - off), s + (h - off))).collect(),
                None => vec![(s, e)],
            };
            for (ds, de) in spans {
                let mut a = ds;
                while a < de {
                    let n = ((de - a) as usize).min(CHUNK);
                    let want = (n + 40).min((de - a) as usize);
                    let read = match &file {
                        Some(f) => std::os::unix::fs::FileExt::read_exact_at(f, &mut buf[..want], off + (a - s)).is_ok(),
                        None => self.mem.read(a, &mut buf[..want]).is_ok(),
                    };
                    if read {
                        infos.extend(tables::code_infos(a, &buf[..want]).into_iter().filter(|i| i.at < a + n as u64));
                    }
                    a += n as u64;
                }
            }
        }
        infos.sort_by_key(|i| i.at);
        infos.dedup_by_key(|i| i.at);
        self.funcs = tables::functions(&infos);
        self.infos = infos;
        self.checked.clear();
    }

    /// The function holding `at`, checked where the table may be older
    /// than the code: past an open function's start (the last of an OTP
    /// 25 module, whose end is a bound) or a closed one's end, the code
    /// up to `at` is read for the info of a function the last read did
    /// not see (a module loaded since: its code, right after the last
    /// module's, was taken for that module's last function, the whole of
    /// a stack named `inet_gethost_native:'-restart_port/1-inlined-0-'/1`
    /// in one run in five). Once per address higher than those checked:
    /// an address a frame runs at is code, and stays its function's.
    fn func_at(&mut self, at: u64) -> Option<Func> {
        let i = self.funcs.partition_point(|f| f.start <= at).checked_sub(1)?;
        let f = self.funcs[i];
        if at < f.end && !f.open {
            return Some(f);
        }
        let from = self.checked.get(&f.start).copied().unwrap_or(f.start);
        let (s, e, _) = self.code.iter().copied().find(|&(s, e, _)| at >= s && at < e)?;
        if at > from {
            // The infos that start in (from, at] (8-aligned, 40 bytes;
            // none is in the table: `f` is its last below `at`), within
            // a function's length of `at`.
            let after = ((from | 7) + 1).max(s);
            let lo = after.max(at.saturating_sub(tables::MAX_FUNC) & !7);
            let hi = (at + tables::INFO_SIZE as u64).min(e);
            let mut buf = vec![0u8; (hi - lo) as usize];
            if self.mem.read(lo, &mut buf).is_ok() {
                let more: Vec<Info> = tables::code_infos(lo, &buf).into_iter().filter(|i| i.at <= at).collect();
                if !more.is_empty() {
                    self.late += more.len() as u64;
                    tables::merge(&mut self.infos, &more);
                    self.funcs = tables::functions(&self.infos);
                }
                // Read whole from `from`: the function now holding `at`
                // has no other's info between its start and `at`.
                if lo == after {
                    let holder = more.last().map_or(f.start, |i| i.at);
                    self.checked.insert(holder, at);
                }
            }
        }
        tables::lookup(&self.funcs, at).copied()
    }

    /// A function of the emulator's own module (`erts_beamasm`: the
    /// `normal_exit/0` under each process's first call, the trace and
    /// exception returns): where an Erlang process's stack ends.
    fn is_emulator(&mut self, f: &Func) -> bool {
        self.atom(f.module).as_deref() == Some("erts_beamasm")
    }

    fn atom(&mut self, ix: u64) -> Option<String> {
        if let Some(a) = self.atoms.get(&ix) {
            return a.clone();
        }
        let m = self.mem;
        let read = |a: u64| m.u64(a).ok();
        let name = (|| {
            let entries = u64::from(m.u32(self.atom_table + tables::ATOM_TABLE_ENTRIES_AT).ok()?);
            if ix >= entries {
                return None;
            }
            let segs = read(self.atom_table + tables::ATOM_TABLE_SEGS_AT)?;
            let seg = read(segs + 8 * (ix >> tables::ATOM_PAGE_SHIFT))?;
            let atom = read(seg + 8 * (ix & ((1 << tables::ATOM_PAGE_SHIFT) - 1)))?;
            let len = u64::from(m.u16(atom + tables::ATOM_LEN_AT).ok()?);
            if len > 1024 {
                return None;
            }
            let text = tables::atom_text(read(atom + tables::ATOM_NAME_AT)?, len, read);
            let mut b = vec![0u8; len as usize];
            m.read(text, &mut b).ok()?;
            Some(String::from_utf8_lossy(&b).into_owned())
        })();
        // Atoms are never freed nor changed: a name read stands.
        if name.is_some() {
            self.atoms.insert(ix, name.clone());
        }
        name
    }

    /// The named address of the function holding `at`, or of the shared
    /// code when it is in none.
    fn name_at(&mut self, at: u64) -> Option<u64> {
        match self.func_at(at) {
            Some(f) => Some(self.named(&f)),
            None => Some(self.shared()),
        }
    }

    fn named(&mut self, f: &Func) -> u64 {
        if let Some(&a) = self.addr.get(&f.start) {
            return a;
        }
        let m = self.atom(f.module).unwrap_or_else(|| format!("atom#{}", f.module));
        let fun = self.atom(f.function).unwrap_or_else(|| format!("atom#{}", f.function));
        let name = format!("${}:{}/{}", quoted(&m), quoted(&fun), f.arity);
        let a = address_of(&name);
        self.names.push(NamedAddr { addr: a, frame: Frame { jit: true, ..Frame::named(wallclock_stream::names::check(&name)) } });
        self.addr.insert(f.start, a);
        a
    }

    fn shared(&mut self) -> u64 {
        *self.shared.get_or_insert_with(|| {
            let a = address_of(SHARED);
            self.names.push(NamedAddr { addr: a, frame: Frame { jit: true, ..Frame::named(SHARED) } });
            a
        })
    }
}

/// An atom as Erlang writes it (and the perf map of `+JPperf`): in
/// quotes unless a lowercase letter then letters, digits, `_` and `@`.
fn quoted(a: &str) -> String {
    let plain = a.chars().next().is_some_and(|c| c.is_ascii_lowercase()) && a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '@');
    if plain {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

/// The parts of `file` in [from, to) that hold data, by
/// `lseek(SEEK_DATA/SEEK_HOLE)` (a memfd's pages never written are holes);
/// the whole range where the file system does not say.
fn data_spans(file: &std::fs::File, from: u64, to: u64) -> Vec<(u64, u64)> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    let mut out = Vec::new();
    let mut at = from;
    while at < to {
        // SAFETY: lseek on an open descriptor; it moves only its offset.
        let d = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
        if d < 0 {
            // ENXIO: no data past `at`; another error: not known, all of it.
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::ENXIO) {
                out.push((at, to));
            }
            break;
        }
        let d = d as u64;
        if d >= to {
            break;
        }
        // SAFETY: as above.
        let h = unsafe { libc::lseek(fd, d as libc::off_t, libc::SEEK_HOLE) };
        let h = if h < 0 { to } else { (h as u64).min(to) };
        out.push((d, h));
        at = h;
    }
    out
}

fn memchr_str(data: &[u8], s: &[u8]) -> Option<usize> {
    data.windows(s.len()).position(|w| w == s)
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

/// The address that stands for an Erlang function, from its name alone
/// (so that every capture tool gives it the same): FNV-1a, 48 bits of it
/// above [`NAMED_ADDR_BASE`], as the V8 reader's.
fn address_of(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    NAMED_ADDR_BASE | (h & 0x000f_ffff_ffff_fff0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memfds_data_found_without_its_holes() {
        use std::os::unix::fs::FileExt;
        // SAFETY: a name and no flags; the descriptor is owned by the File.
        let fd = unsafe { libc::memfd_create(c"wc-test-vmem".as_ptr(), 0) };
        assert!(fd >= 0);
        // SAFETY: a fresh descriptor of ours.
        let f = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        f.set_len(64 << 20).unwrap();
        assert_eq!(data_spans(&f, 0, 64 << 20), vec![]);
        f.write_all_at(b"code", (1 << 20) + 100).unwrap();
        f.write_all_at(&[1u8; 8192], 3 << 20).unwrap();
        assert_eq!(data_spans(&f, 0, 64 << 20), vec![(1 << 20, (1 << 20) + 4096), (3 << 20, (3 << 20) + 8192)]);
        // Bounded by the range asked for (a mapping of part of the file).
        assert_eq!(data_spans(&f, (1 << 20) + 4096, (3 << 20) + 4096), vec![(3 << 20, (3 << 20) + 4096)]);
    }

    #[test]
    fn atoms_quoted_as_erlang_writes_them() {
        assert_eq!(quoted("burn"), "burn");
        assert_eq!(quoted("node@host_1"), "node@host_1");
        assert_eq!(quoted("-main/1-fun-0-"), "'-main/1-fun-0-'");
        assert_eq!(quoted("Elixir.Foo"), "'Elixir.Foo'");
        assert_eq!(quoted("it's"), "'it\\'s'");
    }
}
