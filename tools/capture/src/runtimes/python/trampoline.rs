//! Unwinding through CPython's perf trampolines (`python -X perf`, 3.12+).
//!
//! With `-X perf` CPython copies a small trampoline per code object into
//! anonymous memory and lists each copy in `/tmp/perf-PID.map` as
//! `py::function:file`. The copies have no unwind table, and the
//! interpreter is built without frame pointers, so an .eh_frame unwinder
//! stops at the innermost Python frame. The trampoline
//! (`_Py_trampoline_func_start` in CPython's Python/asm_trampoline.S) is, on
//! x86-64, 11 bytes:
//!
//! ```text
//!  0: 48 83 ec 08   sub  $8, %rsp
//!  4: ff d1         call *%rcx
//!  6: 48 83 c4 08   add  $8, %rsp
//! 10: c3            ret
//! ```
//!
//! so its frame is fixed: after the `sub` (offsets 4 to 9, which includes
//! every return address into it) the caller's return address is at rsp + 8
//! and the caller's rsp is rsp + 16; before it and at the `ret`, they are
//! rsp and rsp + 8. rbp is not touched. Each copy's bytes are checked
//! against this sequence (read from the live process) before the rule is
//! used; a copy that can no longer be read (the process exited) is trusted
//! when the perf map gives it the trampoline's size and a `py::` name.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;

use wallclock_stream::safe_open::{self, Skip};

/// The x86-64 trampoline of CPython 3.12 and 3.13.
const CODE: [u8; 11] = [0x48, 0x83, 0xec, 0x08, 0xff, 0xd1, 0x48, 0x83, 0xc4, 0x08, 0xc3];

/// Re-reads of one process's perf map after a miss (the map grows as code
/// objects are first run; a miss on an address that is not a trampoline
/// must not read the file at every stack).
const MAX_RELOADS: u32 = 256;

#[derive(Default)]
struct PerfMap {
    /// (start, is the trampoline's code) of each `py::` entry of its size, sorted.
    entries: Vec<(u64, Option<bool>)>,
    /// Bytes of the file read so far (whole lines): the file only grows,
    /// so a reload reads what was appended since (a JIT runtime's map can
    /// be megabytes).
    len: u64,
    reloads: u32,
}

/// The trampolines of every process seen, from their perf maps.
#[derive(Default)]
pub struct Trampolines {
    procs: HashMap<u32, PerfMap>,
}

/// One unwound frame: the caller's return address and stack pointer.
pub struct Step {
    pub ret: u64,
    pub sp: u64,
}

impl Trampolines {
    /// If `pc` (the sampled instruction when `leaf`, else a return address)
    /// is inside a CPython trampoline of `pid`, unwind that frame with
    /// `read` (the copied stack).
    pub fn step(&mut self, pid: u32, pc: u64, leaf: bool, sp: u64, read: &mut dyn FnMut(u64) -> Option<u64>) -> Option<Step> {
        let off = self.offset(pid, pc)?;
        // A return address points just after the call: look up the call.
        let off = if leaf { off } else { off.checked_sub(1)? };
        let ra_at = match off {
            0..=3 | 10 => sp,
            4..=9 => sp + 8,
            _ => return None,
        };
        Some(Step { ret: read(ra_at)?, sp: ra_at + 8 })
    }

    /// Whether `pc` is in a checked trampoline of `pid`.
    pub fn contains(&mut self, pid: u32, pc: u64) -> bool {
        self.offset(pid, pc).is_some()
    }

    /// A forked `child` runs its parent's trampolines at the same
    /// addresses before it lists any in its own map.
    pub fn fork(&mut self, parent: u32, child: u32) {
        if let Some(p) = self.procs.get(&parent) {
            let entries = p.entries.clone();
            self.procs.insert(child, PerfMap { entries, ..Default::default() });
        }
    }

    /// Offset of `pc` from the start of the checked trampoline holding it
    /// (for a return address: from the start of the one whose call it
    /// follows, so the end of a copy counts as inside).
    fn offset(&mut self, pid: u32, pc: u64) -> Option<u64> {
        let pm = self.procs.entry(pid).or_default();
        let mut hit = find(&pm.entries, pc);
        if hit.is_none() && pm.reloads < MAX_RELOADS {
            // Its link, if it is one: nothing is followed (see `load`).
            let len = std::fs::symlink_metadata(path(pid).0).map(|m| m.len()).unwrap_or(0);
            if len > pm.len {
                pm.reloads += 1;
                load(pid, pm);
                hit = find(&pm.entries, pc);
            }
        }
        let i = hit?;
        let (start, checked) = &mut pm.entries[i];
        let ok = *checked.get_or_insert_with(|| code_matches(pid, *start));
        ok.then_some(pc - *start)
    }
}

/// Where the map of `pid` is (as shown, and in its own root under the
/// pid it knows itself by), a process gone: ours.
fn path(pid: u32) -> (String, Option<String>) {
    let ns = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("NSpid:"))?.split_whitespace().last()?.parse::<u32>().ok());
    match ns {
        Some(ns) => (format!("/proc/{pid}/root/tmp/perf-{ns}.map"), Some(format!("/tmp/perf-{ns}.map"))),
        None => (format!("/tmp/perf-{pid}.map"), None),
    }
}

fn find(entries: &[(u64, Option<bool>)], pc: u64) -> Option<usize> {
    let i = entries.partition_point(|&(s, _)| s <= pc).checked_sub(1)?;
    (pc - entries[i].0 <= CODE.len() as u64).then_some(i)
}

/// Read what `pid`'s map gained since `pm.len`, as a file the process
/// controls ([`safe_open`]): a map that is not one (a link, a fifo, too
/// big) or older than the process is no longer read.
fn load(pid: u32, pm: &mut PerfMap) {
    use std::io::{Seek, SeekFrom};
    let (shown, inside) = path(pid);
    let opened = match &inside {
        Some(inside) => safe_open::open_in_root(pid, inside, safe_open::owner_of(pid)),
        None => safe_open::open(std::path::Path::new(&shown), safe_open::Owner::Unknown),
    };
    let mut f = match opened {
        Ok(Some(f)) => f,
        Ok(None) => return,
        Err(why) => return give_up(pm, why),
    };
    if safe_open::older_than_process(&f, pid) == Some(true) {
        let why = format!("older than process {pid}: left by an earlier process with that pid");
        return give_up(pm, Skip { path: shown, why });
    }
    if f.seek(SeekFrom::Start(pm.len)).is_err() {
        return;
    }
    let before = pm.entries.len();
    let mut entries = Vec::new();
    let read = safe_open::for_each_line(std::path::Path::new(&shown), &f, safe_open::PERF_MAP, |l| {
        let l = String::from_utf8_lossy(l);
        let mut f = l.splitn(3, ' ');
        let entry = (|| {
            let start = u64::from_str_radix(f.next()?, 16).ok()?;
            let size = u64::from_str_radix(f.next()?, 16).ok()?;
            let name = f.next()?;
            (size == CODE.len() as u64 && name.starts_with("py::")).then_some((start, None))
        })();
        entries.extend(entry);
    });
    // Whole lines only: a line being written is read at the next reload.
    let used = match read {
        Ok(n) => n,
        Err(why) => return give_up(pm, why),
    };
    pm.entries.extend(entries);
    if pm.entries.len() > before {
        // A start seen before keeps what its check found.
        pm.entries.sort_by_key(|e| (e.0, e.1.is_none()));
        pm.entries.dedup_by_key(|e| e.0);
    }
    pm.len += used;
}

/// Read `pm`'s file no more. Not said here: stacksym reads the same
/// file after the capture and says why it skipped it, once.
fn give_up(pm: &mut PerfMap, _why: Skip) {
    pm.reloads = MAX_RELOADS;
}

/// Whether the code at `start` in `pid` is the trampoline; true when it
/// cannot be read any more (the perf map's name and size vouch for it).
fn code_matches(pid: u32, start: u64) -> bool {
    let Ok(f) = std::fs::File::open(format!("/proc/{pid}/mem")) else { return true };
    let mut b = [0u8; CODE.len()];
    match f.read_exact_at(&mut b, start) {
        Ok(()) => b == CODE,
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_map_is_read_as_it_grows() {
        let pid = 0x7fff_fff0 - std::process::id();
        let p = path(pid).0;
        std::fs::write(&p, "1000 b py::f:a.py\n2000 40 node::g\n100b b py::g").unwrap();
        let mut pm = PerfMap::default();
        load(pid, &mut pm);
        assert_eq!(pm.entries, vec![(0x1000, None)]);
        // The unfinished last line, once finished, and a new one.
        std::fs::write(&p, "1000 b py::f:a.py\n2000 40 node::g\n100b b py::g:b.py\n3000 b py::h:c.py\n").unwrap();
        pm.entries[0].1 = Some(true);
        load(pid, &mut pm);
        assert_eq!(pm.entries, vec![(0x1000, Some(true)), (0x100b, None), (0x3000, None)]);
        assert_eq!(pm.len, std::fs::metadata(&p).unwrap().len());
        std::fs::remove_file(&p).unwrap();
    }

    fn with(entries: &[u64]) -> Trampolines {
        let mut t = Trampolines::default();
        let pm = PerfMap { entries: entries.iter().map(|&s| (s, Some(true))).collect(), len: u64::MAX, reloads: MAX_RELOADS };
        t.procs.insert(1, pm);
        t
    }

    #[test]
    fn return_address_into_a_trampoline_unwinds_past_its_sub() {
        let mut t = with(&[0x1000, 0x100b]);
        // Called from 0x100b: return address 0x1011, after the `sub` rsp is
        // 8 below the caller's return address.
        let stack = [0xdead_u64, 0x4242];
        let mut read = |a: u64| stack.get(((a - 0x7000) / 8) as usize).copied();
        let s = t.step(1, 0x100b + 6, false, 0x7000, &mut read).unwrap();
        assert_eq!((s.ret, s.sp), (0x4242, 0x7010));
        // Sampled on its first instruction or its ret: nothing pushed yet.
        let s = t.step(1, 0x1000, true, 0x7000, &mut read).unwrap();
        assert_eq!((s.ret, s.sp), (0xdead, 0x7008));
        let s = t.step(1, 0x100a, true, 0x7000, &mut read).unwrap();
        assert_eq!(s.ret, 0xdead);
        // Past the last copy: not a trampoline.
        assert!(t.step(1, 0x1100, false, 0x7000, &mut read).is_none());
        assert!(t.step(1, 0x0fff, false, 0x7000, &mut read).is_none());
    }

    #[test]
    fn other_code_is_not_taken_for_a_trampoline() {
        let mut t = with(&[0x1000]);
        t.procs.get_mut(&1).unwrap().entries[0].1 = Some(false);
        let mut read = |_| Some(1);
        assert!(t.step(1, 0x1006, false, 0x7000, &mut read).is_none());
    }
}
