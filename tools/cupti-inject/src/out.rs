//! The `gpu-PID.txt` stream (format in the crate docs): the file, the
//! stacks and threads already written, and the lines only this side of
//! the callbacks writes: interned stacks, thread names, the exit tail.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::Ordering;

use crate::abi::FLUSH_FORCED;
use crate::{monotonic_ns, warn, State, STATE};

pub(crate) struct Out {
    pub w: BufWriter<File>,
    stacks: HashMap<Box<[u64]>, u32>,
    threads: HashSet<u32>,
}

/// `$WALLCLOCK_GPUTRACE_DIR/gpu-PID.txt`, appended to.
pub(crate) fn open() -> Option<File> {
    let dir = std::env::var_os("WALLCLOCK_GPUTRACE_DIR")?;
    let path = std::path::Path::new(&dir).join(format!("gpu-{}.txt", std::process::id()));
    std::fs::OpenOptions::new().create(true).append(true).open(path).ok()
}

/// Why CUPTI is unusable: a `W` line, which gputrace prints once as its
/// own warning (the program's stderr stays the program's); on stderr
/// only when the line cannot be written.
pub(crate) fn give_up(w: &mut BufWriter<File>, msg: &str) {
    if writeln!(w, "W {msg}").and_then(|_| w.flush()).is_err() {
        warn(msg);
    }
}

impl Out {
    pub fn new(w: BufWriter<File>) -> Out {
        Out { w, stacks: HashMap::new(), threads: HashSet::new() }
    }

    /// The id of a launch stack, written as an `S` line the first time.
    pub fn intern(&mut self, frames: &[u64]) -> u32 {
        if let Some(&id) = self.stacks.get(frames) {
            return id;
        }
        let id = self.stacks.len() as u32 + 1;
        let mut line = format!("S {id} ");
        for (i, a) in frames.iter().enumerate() {
            let _ = write!(line, "{}{a:x}", if i > 0 { "," } else { "" });
        }
        let _ = writeln!(self.w, "{line}");
        self.stacks.insert(frames.into(), id);
        id
    }

    /// A `T` line the first time a thread is seen, named as it is now.
    pub fn thread(&mut self, tid: u32) {
        if self.threads.insert(tid) {
            let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap_or_default();
            let _ = writeln!(self.w, "T {tid} {}", comm.trim_end());
        }
    }
}

/// At exit: last flush, the executable mappings, the end mark.
pub(crate) extern "C" fn finish() {
    let Some(st) = STATE.get() else { return };
    if std::process::id() != st.pid || st.done.swap(true, Ordering::SeqCst) {
        return;
    }
    // SAFETY: a documented CUPTI call; no lock of ours is held.
    unsafe { (st.cupti.flush_all)(FLUSH_FORCED) };
    write_tail(st);
}

/// The executable mappings and the end mark, flushed.
pub(crate) fn write_tail(st: &State) {
    let maps = wallclock_stream::procmaps::read(std::process::id()).unwrap_or_default();
    let Ok(mut o) = st.out.lock() else { return };
    for m in maps.iter().filter(|m| m.executable() && m.entry.path.starts_with('/')) {
        let e = &m.entry;
        let _ = writeln!(o.w, "M {:x} {:x} {:x} {}", e.start, e.end, e.offset, e.path);
    }
    let _ = writeln!(o.w, "X {}", monotonic_ns());
    let _ = o.w.flush();
}
