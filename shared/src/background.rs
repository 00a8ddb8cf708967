//! Output written by a thread of its own, for the filters of a pipeline.
//!
//! `stacksym | stackmerge` ran one after the other rather than side by
//! side: stacksym reads a chunk of records, names them, then writes 20 MB;
//! a 64 KB pipe fills at once, so stacksym waited on stackmerge while
//! writing, and stackmerge waited on stacksym while it read and named the
//! next chunk (1M records: 6.1 s piped against 2.5 s and 3.2 s alone).
//! Here the tool hands full buffers to a thread that does the blocking
//! writes, up to [`IN_FLIGHT`] behind, and goes on with its next chunk.

use std::io::{self, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

/// Bytes handed over at a time.
const BLOCK: usize = 1 << 20;
/// Blocks written by the thread while the tool goes on: at most this many
/// MB of output wait in memory.
pub const IN_FLIGHT: usize = 32;

enum Msg {
    Data(Vec<u8>),
    /// Flush, then say how the writes went.
    Flush(SyncSender<io::Result<()>>),
}

/// A `Write` whose writes are made by a thread of its own. Errors of the
/// thread's writes (a closed pipe) come back from a later `write` or from
/// `flush`; [`BackgroundWriter::flush`] returns once every byte is written.
pub struct BackgroundWriter {
    buf: Vec<u8>,
    /// Buffers the thread has written, back to be filled again: a new
    /// megabyte for each block was 300 MB of fresh pages faulted in (and
    /// zeroed) for stacksym's output of 1M records.
    spare: Receiver<Vec<u8>>,
    tx: Option<SyncSender<Msg>>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl BackgroundWriter {
    pub fn new<W: Write + Send + 'static>(out: W) -> BackgroundWriter {
        let (tx, rx) = sync_channel(IN_FLIGHT);
        let (back, spare) = sync_channel(IN_FLIGHT + 2);
        let thread = std::thread::Builder::new()
            .name("writer".into())
            .spawn(move || write_all(out, rx, back))
            .expect("cannot start the output thread");
        BackgroundWriter { buf: Vec::with_capacity(BLOCK), spare, tx: Some(tx), thread: Some(thread) }
    }

    fn send(&mut self, m: Msg) -> io::Result<()> {
        let sent = self.tx.as_ref().map(|tx| tx.send(m).is_ok()).unwrap_or(false);
        if sent {
            return Ok(());
        }
        // The thread stopped at an error: that error.
        self.tx = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(Err(e))) => Err(e),
            Some(Err(_)) => Err(io::Error::other("the output thread panicked")),
            _ => Err(io::Error::new(io::ErrorKind::BrokenPipe, "output already closed")),
        }
    }

    fn hand_over(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let next = self.spare.try_recv().unwrap_or_else(|_| Vec::with_capacity(BLOCK));
        let full = std::mem::replace(&mut self.buf, next);
        self.send(Msg::Data(full))
    }
}

/// The thread: write what comes, stop at the first error (returned).
fn write_all<W: Write>(mut out: W, rx: Receiver<Msg>, back: SyncSender<Vec<u8>>) -> io::Result<()> {
    for m in rx {
        match m {
            Msg::Data(mut b) => {
                out.write_all(&b)?;
                b.clear();
                // Kept for the next block unless enough are waiting.
                let _ = back.try_send(b);
            }
            Msg::Flush(done) => {
                let res = out.flush();
                let failed = res.is_err();
                let _ = done.send(res);
                if failed {
                    return out.flush();
                }
            }
        }
    }
    out.flush()
}

impl Write for BackgroundWriter {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        // Handed over before it would grow: growing a full block copied
        // it into a new one twice its size.
        if !self.buf.is_empty() && self.buf.len() + b.len() > self.buf.capacity() {
            self.hand_over()?;
        }
        self.buf.extend_from_slice(b);
        if self.buf.len() >= BLOCK {
            self.hand_over()?;
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.hand_over()?;
        let (done_tx, done_rx) = sync_channel(1);
        self.send(Msg::Flush(done_tx))?;
        match done_rx.recv() {
            Ok(res) => res,
            // The thread stopped before it could answer: its error.
            Err(_) => self.send(Msg::Data(Vec::new())),
        }
    }
}

impl Drop for BackgroundWriter {
    fn drop(&mut self) {
        let _ = self.hand_over();
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_byte_in_order_by_flush() {
        let out = Shared::default();
        let mut w = BackgroundWriter::new(out.clone());
        let mut want = Vec::new();
        for i in 0..300_000u32 {
            let line = format!("{i}\n");
            w.write_all(line.as_bytes()).unwrap();
            want.extend_from_slice(line.as_bytes());
        }
        w.flush().unwrap();
        assert_eq!(*out.0.lock().unwrap(), want);
    }

    struct Closed;

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::new(io::ErrorKind::BrokenPipe, "closed"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_write_error_comes_back() {
        let mut w = BackgroundWriter::new(Closed);
        let mut err = None;
        for _ in 0..(IN_FLIGHT + 4) {
            if let Err(e) = w.write_all(&[b'x'; BLOCK]) {
                err = Some(e);
                break;
            }
        }
        let e = err.unwrap_or_else(|| w.flush().unwrap_err());
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        assert_eq!(w.flush().unwrap_err().kind(), io::ErrorKind::BrokenPipe, "and again at flush");
    }
}
