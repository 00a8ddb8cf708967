//! A finished capture ([`Captured`]) and what the command line asked of
//! it ([`Request`]): its records written to `-o` or stdout.

use anyhow::Result;
use wallclock_stream::Record;

use crate::event::WcThread;
use crate::session::Session;
use crate::target::TargetArgs;
use crate::unwind::Unwind;

/// What the capture command line asks for.
pub struct Request<'a> {
    pub target: &'a TargetArgs,
    /// The positional duration, beside `-d`.
    pub duration: Option<f64>,
    pub command: &'a [String],
    pub max_threads: u32,
    /// Whether the tool wants the stacks of the threads blocked at the
    /// start from the iterator when there is no target (offcputime).
    pub blocked_stacks: bool,
    /// The Maps records of exited processes into a spool as they are
    /// forgotten ([`Unwind::take_gone_spool`]), for a tool that streams
    /// its output from it.
    pub spool_maps: bool,
}

/// A finished capture, for the tool to turn into records.
pub struct Captured<S> {
    /// The tool's name, for warnings.
    pub tool: &'static str,
    pub skel: S,
    pub sess: Session,
    pub unwind: Unwind,
    pub start: u64,
    pub end: u64,
    /// The thread map: tid and the BPF side's accounting.
    pub threads: Vec<(u32, WcThread)>,
    /// The `stats` counters, indexed as [`event::STAT_NAMES`].
    pub counts: Vec<u64>,
    /// `--every`: the windows closed so far; the last one closes with
    /// [`Captured::write`].
    pub windows: Option<crate::window::Windows>,
}

impl<S> Captured<S> {
    /// Write the records to `-o` or stdout, as a stream or (`-f`) as
    /// folded lines weighed by `value`; the tool's exit code (the
    /// launched command's).
    pub fn write(
        mut self,
        args: &TargetArgs,
        records: &[Record],
        value: impl Fn(&wallclock_stream::Stack) -> u64,
    ) -> Result<i32> {
        if let Some(mut w) = self.windows.take() {
            let mut summed: Vec<Record> =
                records.iter().filter(|r| !matches!(r, Record::Slice(_) | Record::SliceStack(_))).cloned().collect();
            // The whole capture's steal was capped to the machine's over
            // all of it; the last window is capped over its own span.
            for r in summed.iter_mut() {
                if let Record::Thread(t) = r {
                    if let Some(s) = self.sess.uncapped_steal.get(&(t.pid, t.tid)) {
                        t.steal_ns = Some(*s);
                    }
                }
            }
            w.close(self.end, summed, true, self.sess.machine_steal.1)?;
        }
        let mut out = wallclock_stream::cli::open_output(args.output.as_deref())?;
        crate::output::write(self.tool, &mut out, records, args.folded, value)?;
        drop(out);
        Ok(self.sess.finish())
    }

    /// As [`Captured::write`], with the records of each splice (records
    /// the capture wrote out as it went, `spool`) before `records[at]`:
    /// streamed from where they are, unless the output needs them all at
    /// once (folded lines, the windows of `--every`).
    pub fn write_spliced(
        mut self,
        args: &TargetArgs,
        records: &[Record],
        splices: Vec<(usize, crate::spool::Spooled)>,
        value: impl Fn(&wallclock_stream::Stack) -> u64,
    ) -> Result<i32> {
        let mut parts: Vec<Box<dyn Iterator<Item = std::io::Result<std::borrow::Cow<'_, Record>>>>> = Vec::new();
        let mut from = 0;
        for (at, spooled) in splices {
            let at = at.clamp(from, records.len());
            parts.push(Box::new(records[from..at].iter().map(|r| Ok(std::borrow::Cow::Borrowed(r)))));
            parts.push(Box::new(spooled.map(|r| r.map(std::borrow::Cow::Owned))));
            from = at;
        }
        parts.push(Box::new(records[from..].iter().map(|r| Ok(std::borrow::Cow::Borrowed(r)))));
        let all = parts.into_iter().flatten();
        if args.folded || self.windows.is_some() {
            let all: Vec<Record> = all.map(|r| r.map(std::borrow::Cow::into_owned)).collect::<std::io::Result<_>>()?;
            return self.write(args, &all, value);
        }
        let mut out = wallclock_stream::cli::open_output(args.output.as_deref())?;
        crate::output::write_stream(&mut out, all)?;
        drop(out);
        Ok(self.sess.finish())
    }
}
