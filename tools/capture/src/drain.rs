//! The ring buffer of new stacks, drained by a thread of its own whose
//! callback only copies each event out (the part of the user stack that
//! was read, not the whole 32K slot). The buffer then empties as fast as
//! memory is copied, while the unwinding, slower, runs on the main thread
//! from the queue: a burst of first stacks (thousands of threads waking at
//! once, or arriving while the threads blocked at the start are read from
//! /proc) costs heap for a moment instead of dropped stacks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use libbpf_rs::{MapHandle, RingBufferBuilder};
use crate::event::WcEvent;

pub struct Drain {
    rx: Receiver<Vec<u8>>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
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
        let mut b = RingBufferBuilder::new();
        // Built here so that an error is reported before the capture starts.
        b.add(&events, move |data: &[u8]| {
            let _ = tx.send(trimmed(data));
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
        Ok(Drain { rx, stop, thread })
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
                Ok(e) => f(&e),
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
