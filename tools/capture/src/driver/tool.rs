//! What differs between the capture tools ([`Tool`]), and what a tool's
//! `--every` snapshot reads of the capture so far ([`Cut`]).

use anyhow::Result;
use libbpf_rs::Link;
use wallclock_stream::Record;

use super::skel::{CaptureSkel, Common};
use crate::event::WcThread;
use crate::session::Session;
use crate::target::monotonic_ns;
use crate::unwind::Unwind;

/// What differs between the capture tools.
pub trait Tool {
    type Skel: CaptureSkel;
    /// The tool's name, for errors.
    const NAME: &'static str;
    /// Open the skeleton (its object from [`object`]), call
    /// [`OpenCapture::common`], set the tool's own rodata, sizes and
    /// autoloads, load.
    fn load(&self, common: &Common, btf: bool) -> Result<Self::Skel, libbpf_rs::Error>;
    /// Attach the tool's own programs; the links last until the stop.
    fn attach(&self, skel: &Self::Skel, btf: bool) -> Result<Vec<Link>>;
    /// One stack event of the ring buffer (possibly without the unread
    /// tail of its user-stack copy: read it with `WcEvent::parse`).
    fn event(&mut self, data: &[u8], unwind: &mut Unwind);
    /// `--every`: the records of the capture from its start to its end (at
    /// least `end`, see [`Cut::end_after_reads`]), as at a stop there,
    /// while it goes on, with that end; None when the tool has no windows.
    fn snapshot(&mut self, _cut: Cut<'_, Self::Skel>) -> Option<(u64, Vec<Record>)> {
        None
    }
    /// These threads exited and their entries leave the thread map (see
    /// [`super::Retired`]): move the tool's own map entries of theirs out too.
    /// True: the tool keeps the threads itself (and gives them back at
    /// the stop, those it has not written out), the capture only their pids.
    fn retire(&mut self, _skel: &Self::Skel, _dead: &[(u32, WcThread)]) -> bool {
        false
    }
    /// A turn of the capture loop, with the session and the unwinder as
    /// they are: a tool may write out what is final (offcputime's exited
    /// threads) instead of holding it until the stop.
    fn turn(&mut self, _skel: &Self::Skel, _sess: &Session, _unwind: &Unwind) -> Result<()> {
        Ok(())
    }
    /// `--goroutines FILE`: sample the Go targets' goroutines at this rate
    /// into FILE (crate::samplers::goroutines).
    fn goroutines(&self) -> Option<(u64, std::path::PathBuf)> {
        None
    }
    /// `--tasks FILE`: the same for asyncio tasks (crate::samplers::asyncio).
    fn tasks(&self) -> Option<(u64, std::path::PathBuf)> {
        None
    }
}

/// What a tool's [`Tool::snapshot`] reads: the capture so far.
pub struct Cut<'a, S> {
    pub skel: &'a S,
    pub sess: &'a Session,
    pub unwind: &'a Unwind,
    pub start: u64,
    /// Where the window ends, read after `threads` and `counts`. A tool
    /// that reads more of the BPF side's sums after it (offcputime's
    /// thread map) moves the end to after its last read, unless the end
    /// is `fixed` (a follower's: its leader's end).
    pub end: u64,
    pub fixed: bool,
    pub threads: Vec<(u32, WcThread)>,
    pub counts: Vec<u64>,
}

impl<S> Cut<'_, S> {
    /// The window's end for sums read until now: `end`, or now if later
    /// and the end is not fixed. Time counted after the end would be
    /// counted in this window and taken back from the next (a thread's
    /// interval read at 105% of it in a slow guest, then short).
    pub fn end_after_reads(&self) -> u64 {
        if self.fixed {
            self.end
        } else {
            self.end.max(monotonic_ns())
        }
    }
}
