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

/// Bytes of events queued for the main thread at most. Past it the
/// thread stops taking events out of the ring buffer until the main
/// thread has caught up: the ring fills and BPF counts what it drops
/// (`ringbuf_drops`, said at the end with the flag that helps) instead of
/// the queue growing with the capture (a machine running a parallel build
/// sends 1,700 new stacks a second, of up to 32K each, to a main thread
/// the build leaves little CPU). Not while the stacks of the threads
/// blocked at the start of a system-wide capture come (see
/// [`Drain::bounded`]).
const QUEUE_MAX: usize = 16 << 20;

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
    // SAFETY: gettid and setpriority have no memory preconditions; for
    // PRIO_PROCESS a thread id names that thread alone.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, -20);
    }
}

impl Drain {
    pub fn start(events: MapHandle) -> Result<Drain> {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let sent = Arc::new(AtomicU64::new(0));
        let counted = sent.clone();
        let queued = Arc::new(AtomicUsize::new(0));
        let limit = Arc::new(AtomicUsize::new(usize::MAX));
        let armed = Arc::new(AtomicBool::new(false));
        let (full, waiting, max, arm) = (queued.clone(), stop.clone(), limit.clone(), armed.clone());
        let mut b = RingBufferBuilder::new();
        // Built here so that an error is reported before the capture starts.
        b.add(&events, move |data: &[u8]| {
            if arm.load(Ordering::Relaxed) && full.load(Ordering::Acquire) <= QUEUE_MAX {
                max.store(QUEUE_MAX, Ordering::Relaxed);
            }
            while full.load(Ordering::Acquire) > max.load(Ordering::Relaxed) && !waiting.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let e = trimmed(data);
            full.fetch_add(e.len(), Ordering::AcqRel);
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
        Ok(Drain { rx, queued, armed, stop, thread, sent, handled: Cell::new(0) })
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
                    f(&e);
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
            f(&e);
        }
    }
}
