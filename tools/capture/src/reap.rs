//! What the unwinder keeps of a process that exited: its mappings, for
//! the Maps record, and nothing else. Its unwinder (a rule cache and a
//! DWARF evaluation context of about 40 KB each, with a module per
//! mapping) goes: a system-wide capture of a machine running a parallel
//! build sees about 70 new processes a second, and keeping them all made
//! memory grow with the length of the capture (85 MB in 30 s).
//!
//! The exit is learnt once a second, from /proc (oncputime has no
//! switch hook to see it), a little after the fact; stacks the process
//! sent before it exited may still be in the ring buffer or in the
//! drain's queue. So a process is dropped only once every event sent by
//! the time of the turn after its exit was seen has been handled.

use super::Unwind;

/// How far past a process's exit a stack handled must be before its
/// maps go: stacks of several CPUs come a little out of time order.
const EXIT_SLACK: u64 = 200_000_000;

/// Whether process `pid` still exists (a zombie does, until reaped).
fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Exited processes on their way out: pid, and the count of events sent
/// (see [`Unwind::reap`]) that must have been handled before it goes.
#[derive(Default)]
pub(super) struct Reaper {
    pending: Vec<(u32, Option<u64>)>,
    last: Option<std::time::Instant>,
    trimmed: Option<std::time::Instant>,
}

impl Unwind {
    /// A turn of the capture loop (the work is done once a second, or
    /// every 200 ms with the mmap log): `sent` and `handled` count the
    /// ring buffer's events so far, sent by the drain thread and handled
    /// by the unwinder.
    pub fn reap(&mut self, sent: u64, handled: u64) {
        let every = std::time::Duration::from_millis(if self.log.is_some() { 200 } else { 1000 });
        if self.reaper.last.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        self.reaper.last = Some(std::time::Instant::now());
        // With the kernel's record of each exit, a process goes once a
        // stack from after its exit was handled (the ring buffer is read
        // in order): its own came before. Its unwinder (80 KB) went 2-3 s
        // after its exit otherwise, and every short process of a build
        // has one now that its maps are known: 20 MB more at the peak of
        // a 30 s system-wide capture.
        let last = self.last_ts;
        if let Some(log) = self.log.as_mut() {
            log.sync(u64::MAX);
        }
        let exited: Vec<u32> = self.procs.keys().copied().filter(|&p| self.past_exit(p) == Some(true)).collect();
        for pid in exited {
            self.forget(pid);
        }
        let procs = &self.procs;
        if let Some(log) = self.log.as_mut() {
            log.forget_exited(last.saturating_sub(EXIT_SLACK), |p| procs.contains_key(&p));
        }
        // Else (no log, or its record of the exit lost), by /proc, once a
        // second. The count alone let a process go while its stacks
        // waited in the ring buffer (the drain holds off while its queue
        // is full): its later stacks found no maps.
        if self.reaper.trimmed.is_some_and(|t| t.elapsed() < std::time::Duration::from_secs(1)) {
            return;
        }
        let mut pending = std::mem::take(&mut self.reaper.pending);
        pending.retain_mut(|(pid, mark)| match *mark {
            // Gone already (by the log's record of its exit).
            _ if !self.procs.contains_key(pid) => false,
            None => {
                *mark = Some(sent);
                true
            }
            Some(m) if m <= handled && self.past_exit(*pid) != Some(false) => {
                self.forget(*pid);
                false
            }
            Some(_) => true,
        });
        // Marked at the next turn: what the process sent before its exit
        // may not have left the ring buffer yet.
        let exited = self.procs.keys().copied().filter(|pid| !pending.iter().any(|(p, _)| p == pid) && !alive(*pid));
        let exited: Vec<u32> = exited.collect();
        pending.extend(exited.into_iter().map(|pid| (pid, None)));
        self.reaper.pending = pending;
        self.trim();
    }

    /// By the mmap log's record of its exit: whether a stack from well
    /// after the exit of `pid` was handled (None: no record of its exit).
    fn past_exit(&self, pid: u32) -> Option<bool> {
        let log = self.log.as_ref()?;
        let exit = *log.exits.get(&pid)?;
        // The exit of an earlier process of a pid used again: not this one's.
        if self.procs.get(&pid).is_some_and(|p| p.pgen > log.pgen(pid, exit)) {
            return Some(false);
        }
        Some(self.last_ts > exit.saturating_add(EXIT_SLACK))
    }

    /// A stack (or fork) of `pid` at `ts` comes from a later process of
    /// that pid than the one whose mappings are kept under it: the pid
    /// was used again within the capture. The earlier process's Maps
    /// record is made now, with its `pgen`, and its mappings go, so that
    /// the new process is unwound against its own (a process forked from
    /// another program, or the same one at other addresses, unwound
    /// against the earlier one's mappings had no names).
    pub(super) fn rebirth(&mut self, pid: u32, ts: u64) {
        let Some(now) = self.pgen_at(pid, ts) else { return };
        let had = match (self.procs.get(&pid), self.gone.get(&pid)) {
            (Some(p), _) => p.pgen,
            (None, Some((g, _))) => *g,
            (None, None) => return,
        };
        if now <= had {
            return;
        }
        if self.procs.contains_key(&pid) {
            self.forget(pid);
        }
        if let Some(m) = self.maps_record(pid) {
            self.older.push(m);
        }
        self.gone.remove(&pid);
        self.retired.remove(&pid);
        self.truncated.remove(&pid);
        self.exec_ino.remove(&pid);
        self.reloads.remove(&pid);
    }

    /// Keep only the mappings of `pid`, for its Maps record: in the
    /// spool, when there is one (a spool that failed to take a record is
    /// used no more; what follows stays in memory).
    fn forget(&mut self, pid: u32) {
        if let Some(p) = self.procs.remove(&pid) {
            let pgen = p.pgen;
            self.gone.insert(pid, (pgen, p.maps));
            // Made while the log still has the process's files and exit.
            let record = self.maps_record(pid);
            if let Some(log) = self.log.as_mut() {
                log.forget(pid, pgen);
            }
            if let Some(m) = &record {
                self.gone.insert(pid, (pgen, m.maps.clone()));
            }
            if let (Some(m), true) = (record, self.gone_spool.is_some() && !self.gone_spool_failed) {
                match self.gone_spool.as_mut().map(|s| s.push(&wallclock_stream::Record::Maps(m))) {
                    Some(Ok(())) => {
                        self.gone.remove(&pid);
                        self.retired.remove(&pid);
                        self.truncated.remove(&pid);
                    }
                    _ => self.gone_spool_failed = true,
                }
            }
        }
        self.exec_ino.remove(&pid);
        self.reloads.remove(&pid);
    }

    /// [`Unwind::trim`], at most every 200 ms: at the start of a
    /// system-wide capture the stacks of every thread blocked then are
    /// unwound at once, through the files of hundreds of processes, and
    /// trimmed once a second the pages read made 30 MB of its peak.
    pub fn trim_often(&mut self) {
        if self.reaper.trimmed.is_some_and(|t| t.elapsed() < std::time::Duration::from_millis(200)) {
            return;
        }
        self.trim();
    }

    /// From now on, write the Maps record of each exited process into
    /// `spool` instead of keeping its mappings.
    pub fn spool_gone(&mut self, spool: crate::spool::Spool) {
        self.gone_spool = Some(spool);
    }

    /// The spool of exited processes' Maps records: they are not among
    /// [`Unwind::maps_records`].
    pub fn take_gone_spool(&mut self) -> Option<crate::spool::Spool> {
        self.gone_spool.take()
    }

    /// Give back the pages of the mapped files read so far (the page
    /// cache keeps them): unwind tables and code are looked at here and
    /// there, and the kernel maps the pages around each one read, so that
    /// what is resident grew with every stack (100 MB system-wide: a few
    /// pages of librustc_driver's tables for each rustc).
    pub fn trim(&mut self) {
        self.reaper.trimmed = Some(std::time::Instant::now());
        for map in self.files.values().flatten().filter_map(|f| f.map.as_ref()) {
            // SAFETY: a read-only shared mapping of a file: the pages come
            // back from the page cache, the same bytes, when next read.
            let _ = unsafe { map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
        }
    }
}
