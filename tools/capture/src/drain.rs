//! The ring buffer of new stacks, drained by a thread of its own whose
//! callback only copies each event out (the part of the user stack that
//! was read, not the whole 32K slot). The buffer then empties as fast as
//! memory is copied, while the unwinding, slower, runs on the main thread
//! from the queue: a burst of first stacks (thousands of threads waking at
//! once, or arriving while the threads blocked at the start are read from
//! /proc) costs heap for a moment instead of dropped stacks.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use libbpf_rs::{MapHandle, RingBufferBuilder};
use crate::event::WcEvent;

/// Bytes of events queued for the main thread at most (or four rings'
/// worth, [`Drain::start`], if more). Past it the
/// thread stops taking events out of the ring buffer until the main
/// thread has caught up: the ring fills and BPF counts what it drops
/// (`ringbuf_drops`, said at the end with the flag that helps) instead of
/// the queue growing with the capture (a machine running a parallel build
/// sends 1,700 new stacks a second, of up to 32K each, to a main thread
/// the build leaves little CPU). Not while the stacks of the threads
/// blocked at the start of a system-wide capture come (see
/// [`Drain::bounded`]).
const QUEUE_MAX: usize = 16 << 20;

/// Ring buffer bytes a target thread is given when `--ringbuf-mb` is not:
/// room for one stack event of each (its fixed part, 10 KB with the
/// Python frames' room, and a 4-16K copy) when every thread sends its
/// first stack at once. A 2,000-thread process on the 4 MiB default filled
/// the ring 5,000-11,000 times in a 4 s capture beside two CPU hogs.
const RING_PER_THREAD: u64 = 16 << 10;

/// The ring buffer's size when `--ringbuf-mb` is not given: 16 MiB
/// system-wide, else 16K a thread of the targets at the start, as a power
/// of two from 4 to 64 MiB.
pub fn ring_bytes(system_wide: bool, threads: usize) -> u32 {
    if system_wide {
        return 16 << 20;
    }
    let want = (threads as u64 * RING_PER_THREAD).next_power_of_two();
    want.clamp(4 << 20, 64 << 20) as u32
}


pub struct Drain {
    rx: Receiver<Vec<u8>>,
    queued: Arc<AtomicUsize>,
    armed: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
    /// Events queued by the thread, and handed to the main thread's `f`
    /// (`Unwind::reap` waits for an exited process's last ones).
    sent: Arc<AtomicU64>,
    handled: Cell<u64>,
    /// Time the main thread spent on the events (`f`), and the drain
    /// thread spent waiting for the queue to go under its bound.
    busy_ns: Cell<u64>,
    stalled_ns: Arc<AtomicU64>,
    peak: Arc<AtomicUsize>,
}

/// The event without the unread tail of its user-stack copy.
fn trimmed(data: &[u8]) -> Vec<u8> {
    let at = std::mem::offset_of!(WcEvent, ustack_bytes);
    let used = data.get(at..at + 4).map_or(0, |b| u32::from_ne_bytes(b.try_into().unwrap()) as usize);
    let len = (std::mem::offset_of!(WcEvent, ustack) + used).min(data.len());
    data[..len].to_vec()
}

/// The consumer at the highest nice level: on a loaded machine (a build
/// on every CPU) it waited tens of ms for a CPU while a burst of new
/// stacks (a browser starting) filled the ring buffer, and the copies
/// after that were dropped. It only copies memory out, so it takes little
/// from the workload. Best effort: without the privilege it stays as is.
fn raise_priority() {
    set_nice(-20);
}

/// The calling thread's nice level (a thread id names that thread alone).
fn set_nice(nice: i32) {
    // SAFETY: gettid and setpriority have no memory preconditions.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice);
    }
}

impl Drain {
    /// `ring`: the ring buffer's size in bytes.
    pub fn start(events: MapHandle, ring: u32) -> Result<Drain> {
        // Four rings: a burst the ring took in is queued whole while the
        // main thread, which gets a CPU less often than the drain thread
        // on a loaded machine, unwinds it. Bounded at 16 MiB, the queue
        // of a 2,000-thread process's first stacks stopped the drain
        // thread for seconds and the ring filled behind it: 27,290 copies
        // dropped, 5.4% of the thread-time under [lost stack].
        let bound = QUEUE_MAX.max(4 * ring as usize);
        // The main thread (the caller), which unwinds what the queue
        // holds, above the workload too: at nice 0 beside a 2,000-thread
        // target (load 50-150 on 2 CPUs) it got so little CPU that a 4 s
        // capture stopped after 15-39 s with 150-600 MB queued. Its work
        // is the stacks' (bounded by the queue), not more of it: the
        // launched command was forked before, at its own level.
        set_nice(-10);
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let sent = Arc::new(AtomicU64::new(0));
        let counted = sent.clone();
        let queued = Arc::new(AtomicUsize::new(0));
        let limit = Arc::new(AtomicUsize::new(usize::MAX));
        let armed = Arc::new(AtomicBool::new(false));
        let (full, waiting, max, arm) = (queued.clone(), stop.clone(), limit.clone(), armed.clone());
        let stalled_ns = Arc::new(AtomicU64::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let (stalled, top) = (stalled_ns.clone(), peak.clone());
        let mut b = RingBufferBuilder::new();
        // Built here so that an error is reported before the capture starts.
        b.add(&events, move |data: &[u8]| {
            if arm.load(Ordering::Relaxed) && full.load(Ordering::Acquire) <= bound {
                max.store(bound, Ordering::Relaxed);
            }
            let t = Instant::now();
            let mut waited = false;
            while full.load(Ordering::Acquire) > max.load(Ordering::Relaxed) && !waiting.load(Ordering::Relaxed) {
                waited = true;
                std::thread::sleep(Duration::from_millis(1));
            }
            if waited {
                stalled.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
            let e = trimmed(data);
            let q = full.fetch_add(e.len(), Ordering::AcqRel) + e.len();
            top.fetch_max(q, Ordering::Relaxed);
            let _ = tx.send(e);
            counted.fetch_add(1, Ordering::Release);
            0
        })?;
        let rb = b.build().context("opening the stack ring buffer")?;
        let thread = std::thread::Builder::new()
            .name("ringbuf".into())
            .spawn(move || {
                raise_priority();
                while !stopping.load(Ordering::Relaxed) {
                    let _ = rb.poll(Duration::from_millis(20));
                }
                let _ = rb.consume();
                drop(rb);
                drop(events);
            })
            .context("starting the ring buffer thread")?;
        Ok(Drain { rx, queued, armed, stop, thread, sent, handled: Cell::new(0), busy_ns: Cell::new(0), stalled_ns, peak })
    }

    /// Bound the queue ([`QUEUE_MAX`]) once it is under the bound. Until then it takes
    /// what comes: the stacks of every thread blocked at the start of a
    /// system-wide capture (2,500 here) come at once, and with the queue
    /// bounded the ring stayed full while they were unwound: the stacks
    /// of the first switches were lost (6.6% of the thread-time of
    /// tests/systemwide.rs's idle machine).
    pub fn bounded(&self) {
        self.armed.store(true, Ordering::Relaxed);
    }

    /// Events sent so far, and handled so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.sent.load(Ordering::Acquire), self.handled.get())
    }

    /// Hand events to `f` as they come for `budget`: one turn of the
    /// capture loop. Returning when the queue ran dry instead made a turn
    /// per event (hundreds a second from a Python program), each with the
    /// turn's own work (is the target alive, the Python thread list):
    /// most of offcputime's CPU time.
    pub fn work_for(&self, budget: Duration, mut f: impl FnMut(&[u8])) {
        let until = Instant::now() + budget;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            match self.rx.recv_timeout(left) {
                Ok(e) => {
                    self.queued.fetch_sub(e.len(), Ordering::AcqRel);
                    let t = Instant::now();
                    f(&e);
                    self.busy_ns.set(self.busy_ns.get() + t.elapsed().as_nanos() as u64);
                    self.handled.set(self.handled.get() + 1);
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// Stop draining (after a last pass over the buffer) and hand every
    /// event still queued to `f`.
    pub fn finish(self, mut f: impl FnMut(&[u8])) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        for e in self.rx.try_iter() {
            let t = Instant::now();
            f(&e);
            self.busy_ns.set(self.busy_ns.get() + t.elapsed().as_nanos() as u64);
            self.handled.set(self.handled.get() + 1);
        }
        if std::env::var_os("WALLCLOCK_DRAIN_STATS").is_some() {
            let n = self.handled.get().max(1);
            eprintln!(
                "drain: {} events, {} ns each on the main thread ({} ms in all), drain thread stalled {} ms, queue peak {} KiB",
                self.handled.get(),
                self.busy_ns.get() / n,
                self.busy_ns.get() / 1_000_000,
                self.stalled_ns.load(Ordering::Relaxed) / 1_000_000,
                self.peak.load(Ordering::Relaxed) >> 10
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ring_bytes;

    #[test]
    fn the_ring_follows_the_thread_count_within_its_bounds() {
        assert_eq!(ring_bytes(false, 1), 4 << 20);
        assert_eq!(ring_bytes(false, 300), 8 << 20);
        assert_eq!(ring_bytes(false, 2001), 64 << 20 >> 1);
        assert_eq!(ring_bytes(false, 100_000), 64 << 20);
        assert_eq!(ring_bytes(true, 1), 16 << 20);
    }
}
