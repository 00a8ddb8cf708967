//! Exited threads written out during the capture, so that what the
//! capture holds is bounded by the threads alive, not by how long it runs.
//!
//! A system-wide capture of a machine running a parallel build sees
//! thousands of short-lived threads (5,900 processes in 30 s), each with
//! its own stacks (BPF mixes the tid into a fingerprint): keeping every
//! stack unwound until the stop, then every record, made offcputime's
//! memory grow with the capture (180 MB in 30 s). A thread that exited is
//! final: its entry and blocks leave the BPF maps once a second
//! (`driver::Retired`); once every stack event it sent has been handled,
//! its blocks become stack records, exactly as the stop would make them
//! (`collect::Resolve`), framed in the binary encoding into a spool file
//! (unlinked, in the temporary directory), and its stacks are dropped.
//! The stop writes the spool's records among its own stack records (the
//! stream's stack records are in no particular order); its thread record
//! and its share of the trailer's counts are kept until then ([`Done`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use wallclock_capture::event::{self, WcOkey, WcThread};

use wallclock_capture::objects::Namer;
use wallclock_capture::session::Session;
use wallclock_capture::unwind::Unwind;
use wallclock_capture::spool::Spool;
use wallclock_stream::Record;

use crate::blocks::Acc;
use crate::collect::{self, Config, Done, Resolve, Stacks, Sums};

/// A BPF map's entries, as (key, value) bytes.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

#[derive(Default)]
struct Kept {
    threads: Vec<(u32, WcThread)>,
    entries: Entries,
}

/// Threads retired at one turn, with their blocks.
struct Batch {
    at: Instant,
    threads: Vec<(u32, WcThread)>,
    entries: Entries,
    /// Stack events counted by BPF by the time all of these threads' own
    /// were sent (`new_stacks`): once that many have been handled, theirs
    /// have been.
    mark: Option<u64>,
}

const SPOOL: &str = "the spool of off-CPU stack records (in TMPDIR)";

pub struct Early {
    spool: Spool,
    pub done: Done,
    /// Retired threads left to the stop, and their blocks.
    kept: Kept,
    pending: Vec<Batch>,
    /// Stack events handled so far.
    handled: u64,
}

impl Early {
    pub fn new() -> Result<Early> {
        Ok(Early { spool: Spool::new().with_context(|| format!("creating {SPOOL}"))?, done: Done::default(), kept: Kept::default(), pending: Vec::new(), handled: 0 })
    }

    /// A stack event was handled.
    pub fn event(&mut self) {
        self.handled += 1;
    }

    /// Threads that exited, and their blocks moved out of the map.
    pub fn retire(&mut self, threads: &[(u32, WcThread)], entries: Entries) {
        self.pending.push(Batch { at: Instant::now(), threads: threads.to_vec(), entries, mark: None });
    }

    /// A turn of the capture: write out the batches whose stacks have all
    /// been handled. `new_stacks`: BPF's count of stack events sent. The
    /// fingerprints dropped, for BPF's `seen` map.
    pub fn turn(&mut self, new_stacks: impl FnOnce() -> u64, cfg: &Config, sess: &Session, unwind: &Unwind, stacks: &mut Stacks, names: &Namer) -> Result<Vec<u64>> {
        // Marked a second after the retirement: a stack event reserved
        // before a thread's last one may still have been in flight then.
        if self.pending.iter().any(|b| b.mark.is_none() && b.at.elapsed() >= Duration::from_secs(1)) {
            let n = new_stacks();
            for b in self.pending.iter_mut().filter(|b| b.mark.is_none() && b.at.elapsed() >= Duration::from_secs(1)) {
                b.mark = Some(n);
            }
        }
        let handled = self.handled;
        let ready = |b: &Batch| b.mark.is_some_and(|m| m <= handled);
        if !self.pending.iter().any(ready) {
            return Ok(Vec::new());
        }
        let (now, later): (Vec<Batch>, Vec<Batch>) = std::mem::take(&mut self.pending).into_iter().partition(ready);
        self.pending = later;
        let mut gone = Vec::new();
        for b in now {
            let used = self.write(&b, cfg, sess, unwind, stacks, names)?;
            for (tid, th) in b.threads.iter().filter(|(tid, _)| used.contains_key(tid)) {
                let mine = used.get(tid).into_iter().flatten().copied();
                gone.extend(stacks.forget(event::real_tid(*tid), th.exit_ns, mine));
            }
        }
        Ok(gone)
    }

    /// One batch into the spool and `done`; the fingerprints each of its
    /// threads' blocks were under.
    fn write(&mut self, b: &Batch, cfg: &Config, sess: &Session, unwind: &Unwind, stacks: &Stacks, names: &Namer) -> Result<BTreeMap<u32, Vec<u64>>> {
        let r = Resolve { cfg, sess, stacks };
        let mut acc = Acc::default();
        let mut sums = Sums::default();
        // A thread the task iterator did not visit (snapped) that was alive
        // at the start may be one the kernel hides from BPF: whether it is
        // is known at the stop (wallclock_capture::hidden), which accounts it.
        let (kept, written): (Vec<_>, Vec<_>) = b.threads.iter().partition(|(_, th)| th.snapped == 0 && th.begin_ns <= sess.start_ns);
        let kept_tids: std::collections::HashSet<u32> = kept.iter().map(|(t, _)| *t).collect();
        self.kept.threads.extend(kept);
        let mut used: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for (k, v) in &b.entries {
            let Some(key) = event::from_bytes::<WcOkey>(k) else { continue };
            if kept_tids.contains(&key.key()) {
                self.kept.entries.push((k.clone(), v.clone()));
                continue;
            }
            r.add_entry(&mut acc, k, v, |_| false);
            used.entry(key.key()).or_default().push(key.fp);
        }
        // The records and their threads' keys (event::thread_key: two
        // threads of one tid may be in one batch).
        let (mut threads, mut keys) = (Vec::new(), Vec::new());
        for (tid, th) in written {
            used.entry(tid).or_default().extend([th.pend_fp[0], th.pend_fp[1], th.cur_fp]);
            let mut t = r.thread(&mut acc, tid, th, &mut sums, |th| event::comm_str(&th.comm));
            t.pgen = unwind.pgen(th.pid, th.begin_ns);
            threads.push(t);
            keys.push(tid);
            self.done.tids.insert(tid);
        }
        unwind.runtimes.name_threads(threads.iter_mut());
        let done = &self.done.threads;
        let comm_by_tid = |t: u32| keys.iter().position(|k| *k == t).map(|i| &threads[i]).or_else(|| done.iter().find(|x| x.tid == t)).map(|t| t.comm.clone());
        for ((tid, state, w, o), (ns, count)) in &acc.stacks {
            let t = keys.iter().position(|k| k == tid).map(|i| &threads[i]);
            let (pid, comm, pgen) = t.map(|t| (t.pid, t.comm.as_str(), t.pgen)).unwrap_or_default();
            let mut s = collect::stack_record(pid, *tid, comm, *state, w);
            s.pgen = pgen;
            s.object = names.name(pid, *o, &comm_by_tid);
            s.ns = *ns;
            s.count = *count;
            self.spool.push(&Record::Stack(s)).with_context(|| format!("writing {SPOOL}"))?;
        }
        for (name, (n, ns)) in acc.synthetic {
            let e = self.done.synthetic.entry(name).or_default();
            e.0 += n;
            e.1 += ns;
        }
        for (a, b) in self.done.short.iter_mut().zip(sums.short) {
            a.0 += b.0;
            a.1 += b.1;
        }
        self.done.threads.extend(threads);
        Ok(used)
    }

    /// At the stop: the threads and blocks not written out yet (the
    /// stop makes their records), and the spool, for the stop's own.
    pub fn finish(mut self) -> Finished {
        let Kept { mut threads, mut entries } = self.kept;
        for b in self.pending.drain(..) {
            threads.extend(b.threads);
            entries.extend(b.entries);
        }
        Finished { done: self.done, threads, entries, spool: self.spool }
    }
}

pub struct Finished {
    pub done: Done,
    /// Retired threads not written out yet, and their blocks.
    pub threads: Vec<(u32, WcThread)>,
    pub entries: Entries,
    pub spool: Spool,
}
