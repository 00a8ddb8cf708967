//! Which image of a process a stack ran in, and its mappings then: from
//! the kernel's mmap records (`crate::mmaplog`) when there are some, else
//! from /proc/PID/maps while the process lives; exec and fork markers
//! (bpf/tree.bpf.h) retire an image's mappings or copy a parent's.

use wallclock_stream::MapEntry;

use super::{exe_identity, parse_maps, Proc, Unwind};
use crate::event::WcEvent;

/// Whether the thread of `e` has not yet run in user space: a new
/// thread or process switched out on its way there (its kernel stack
/// begins in `ret_from_fork_asm`). Its user stack is then the one
/// instruction it is to start at.
pub(super) fn not_started(e: &WcEvent) -> bool {
    static RANGES: std::sync::OnceLock<Vec<(u64, u64)>> = std::sync::OnceLock::new();
    let r = RANGES.get_or_init(|| crate::procfs::ranges_of(&["ret_from_fork_asm"]));
    let root = e.kstack_root_first().first().copied().unwrap_or(0);
    r.iter().any(|&(a, b)| root >= a && root < b)
}

/// Whether the kernel stack of `e` is in an exec (`bprm_execve`): see
/// [`Unwind::mid_exec`].
pub(super) fn in_exec(e: &WcEvent) -> bool {
    static RANGES: std::sync::OnceLock<Vec<(u64, u64)>> = std::sync::OnceLock::new();
    let r = RANGES.get_or_init(|| crate::procfs::ranges_of(&["bprm_execve"]));
    e.kstack_root_first().iter().any(|&k| r.iter().any(|&(a, b)| k >= a && k < b))
}

impl Unwind {
    /// Learn (again) the mappings of `pid` at the time of the stack being
    /// unwound (now, outside one): the log's, exact, for an image begun
    /// during the capture; else /proc's while it lives, unless it runs
    /// another image than the one its stacks come from (an exec whose
    /// event is still to come).
    pub fn refresh(&mut self, pid: u32) {
        let ts = self.at.unwrap_or(u64::MAX);
        if let Some(log) = self.log.as_mut() {
            log.sync(ts);
        }
        if let Some((since, maps)) = self.logged(pid, ts, 0).filter(|(s, _)| s.is_some()) {
            // Exact: the image the stack ran in. Another image's maps
            // (an exec whose marker did not come) serve its earlier stacks.
            let mut proc = match self.procs.remove(&pid) {
                Some(p) if p.since == since => p,
                Some(old) => {
                    self.retired.entry(pid).or_default().extend(old.maps);
                    Proc::new(None)
                }
                None => Proc::new(None),
            };
            proc.since = since;
            proc.pgen = self.pgen_now(pid);
            self.add_maps(&mut proc, maps);
            self.procs.insert(pid, proc);
            return;
        }
        let maps = match self.logged(pid, ts, 0) {
            Some((_, maps)) => maps,
            None => parse_maps(pid),
        };
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
        proc.pgen = self.pgen_now(pid);
        self.add_maps(&mut proc, maps);
        self.procs.insert(pid, proc);
    }

    /// The mappings of `pid` at `ts` from the mmap log, and the image's
    /// start when they are exact (all made during the capture); None when
    /// the log does not know the process. Inexact: /proc's (or the fork
    /// parent's, `depth` forks up) with what the log adds.
    pub(super) fn logged(&mut self, pid: u32, ts: u64, depth: u32) -> Option<(Option<u64>, Vec<MapEntry>)> {
        let g = self.log.as_ref()?.gen_at(pid, ts)?;
        let made: Vec<MapEntry> = g.maps.iter().filter(|(t, _)| *t <= ts).map(|(_, m)| m.clone()).collect();
        if g.exact {
            return Some((Some(g.since), made));
        }
        let (parent, since) = (g.parent, g.since);
        let mut maps = match parent {
            Some(pp) if depth < 8 => match self.logged(pp, since, depth + 1) {
                Some((_, m)) => m,
                None => match self.procs.get(&pp) {
                    Some(p) => p.maps.clone(),
                    None => parse_maps(pp),
                },
            },
            _ => parse_maps(pid),
        };
        maps.extend(made);
        Some((None, maps))
    }

    /// A new process `child` of `parent`: until it execs, it runs its
    /// parent's image at its parent's addresses.
    pub fn fork(&mut self, parent: u32, child: u32, ts: u64) {
        self.last_ts = self.last_ts.max(ts);
        self.rebirth(child, ts);
        if self.procs.contains_key(&child) {
            return;
        }
        if let Some(log) = self.log.as_mut() {
            log.sync(ts);
            if log.gen_at(child, ts).is_some() {
                self.at = Some(ts);
                self.refresh(child);
                self.at = None;
                return;
            }
        }
        // Read the parent now: what it mapped since its maps were last read
        // (libc, when they were read just after its own exec) is the child's.
        self.refresh(parent);
        let Some(p) = self.procs.get(&parent) else { return };
        let (exe, maps) = (p.exe, p.maps.clone());
        self.runtimes.fork(parent, child);
        let mut proc = Proc::new(exe);
        proc.pgen = self.pgen(child, ts).unwrap_or(0);
        self.add_maps(&mut proc, maps);
        self.procs.insert(child, proc);
    }

    /// `pid` exec'd the file with inode `ino`: its mappings so far serve
    /// only the stacks that came before; read the new ones while it lives.
    pub fn exec(&mut self, pid: u32, ino: u64, ts: u64) {
        self.last_ts = self.last_ts.max(ts);
        if let Some(old) = self.procs.remove(&pid) {
            self.retired.entry(pid).or_default().extend(old.maps);
        }
        self.exec_ino.insert(pid, ino);
        self.reloads.remove(&pid);
        self.at = Some(ts);
        self.refresh(pid);
        self.at = None;
    }

    /// Learn the mappings from the kernel's records (see mmaplog).
    pub fn use_log(&mut self, log: crate::mmaplog::MmapLog) {
        self.log = Some(log);
    }

    /// The generation of the process of `pid` a thread born at `born`
    /// belongs to (`pgen` of the stream's records): None for the first
    /// process of that pid the capture saw, or without the mmap log.
    pub fn pgen(&self, pid: u32, born: u64) -> Option<u32> {
        Some(self.log.as_ref()?.pgen(pid, born)).filter(|&g| g > 0)
    }

    /// The generation of the process whose mappings are being read: the
    /// stack's (at its time), or outside one the latest process of `pid`
    /// (not every exit of the pid so far: the process read may be the
    /// one that exited).
    pub(super) fn pgen_now(&self, pid: u32) -> u32 {
        match (self.at, self.log.as_ref()) {
            (_, None) => 0,
            (Some(ts), Some(log)) => log.pgen(pid, ts),
            (None, Some(log)) => log.pgen(pid, u64::MAX),
        }
    }

    /// [`Unwind::pgen`] of a stack taken at `ts`, the log's records up to
    /// then applied first (an exit not yet read would leave it 0).
    pub fn pgen_at(&mut self, pid: u32, ts: u64) -> Option<u32> {
        let log = self.log.as_mut()?;
        log.sync(ts);
        Some(log.pgen(pid, ts)).filter(|&g| g > 0)
    }

    /// Apply every record of the mmap log made so far (the exits
    /// [`Unwind::pgen`] counts).
    pub fn sync_log(&mut self) {
        if let Some(log) = self.log.as_mut() {
            log.sync(u64::MAX);
        }
    }

    /// Records of the mmap log the kernel could not write.
    pub fn log_lost(&self) -> u64 {
        self.log.as_ref().map_or(0, |l| l.lost)
    }

    /// Whether a stack of `pid` at `ip`, taken in an exec (its kernel
    /// stack says so), came after the new image's memory replaced the
    /// old (by the log's record of the exec): the registers are still the
    /// old image's, the stack copy comes from the new memory, and a word
    /// of it was read as a caller (cc1: `[truncated];[unknown]+0x..`,
    /// 0.6 s of a 10 s build capture). Such a stack comes before the
    /// exec's marker (bpf/tree.bpf.h). Only `ip` is kept, named against
    /// the old image's maps (retired).
    pub(super) fn mid_exec(&mut self, pid: u32, ip: u64) -> bool {
        let (Some(ts), Some(log)) = (self.at, self.log.as_mut()) else { return false };
        log.sync(ts);
        let Some(since) = log.gen_at(pid, ts).filter(|g| g.exec && g.since > 0).map(|g| g.since) else { return false };
        let hit = |m: &MapEntry| ip >= m.start && ip < m.end;
        let Some((_, before)) = self.logged(pid, since - 1, 0).filter(|(_, b)| b.iter().any(hit)) else { return false };
        let r = self.retired.entry(pid).or_default();
        for m in before {
            if !r.iter().any(|o| o.start == m.start && o.path == m.path) {
                r.push(m);
            }
        }
        true
    }
}
