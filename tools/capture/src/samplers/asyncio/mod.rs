//! asyncio tasks seen from outside: the sampler (samplers/) reads the
//! tasks of each CPython 3.11-3.15 process among the targets from the
//! interpreter's own objects (no BPF, no code in the program): each
//! pending Task's await chain, from its coroutine down to the innermost
//! awaiting one, and its state (waiting on a future, ready to resume,
//! running) (`--tasks FILE`: FILE the folded lines, FILE.report the TASKS
//! section).

mod batch;
mod chain;
mod layout;
mod names;
mod objects;
mod process;

use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use super::tally::{Kind, Seen, Tally};
use super::{Sampler, Source};
use names::stdlib_asyncio;
use process::AsyncioProcess;

/// Tasks read per process per tick, at most: past it a rotating subset
/// is read, each standing for its share.
pub const BUDGET: usize = 1000;

/// How the TASKS section names things.
static KIND: Kind = Kind {
    unit: "task",
    title: "TASKS (asyncio task-seconds",
    unreadable: "task reads failed (their time is under [unreadable])",
    columns: "state                        task-s   mean   most",
    longest: "tasks waiting longest (seen waiting on one future at every sample of them):",
    busy: &["[running]", "[ready]"],
    bare_leaf: true,
    prune: true,
    own,
};

/// The program's own innermost coroutine, not asyncio's sleep.
fn own(stack: &str) -> &str {
    stack.rsplit(';').find(|f| !stdlib_asyncio(f)).or_else(|| stack.rsplit(';').next()).unwrap_or(stack)
}

/// Sample the asyncio tasks of the Python targets at `hz` into `out`.
pub fn start(hz: u64, out: &Path) -> Result<Sampler> {
    Sampler::start("--tasks", hz, out, true, || Tasks)
}

struct Tasks;

impl Source for Tasks {
    type Proc = AsyncioProcess;
    const BUDGET: usize = BUDGET;
    const KIND: &'static Kind = &KIND;

    /// The asyncio reader of `pid`, if it runs a CPython whose tasks this
    /// reads (asyncio itself is looked for at each tick until imported).
    fn find(&mut self, pid: u32, _ident: (u64, u64)) -> Option<AsyncioProcess> {
        let it = crate::runtimes::python::reader::Interpreter::find(pid).ok()?;
        let lay = match layout::for_minor(it.offsets.minor) {
            Some(l) => *l,
            None => layout::from_debug(it.offsets.minor, &it.debug_table()?)?,
        };
        Some(AsyncioProcess::new(it, lay))
    }

    /// A process just exec'd may not have mapped its libpython yet:
    /// looked for again a second later, three times at most, so that a
    /// thousand other processes do not cost a read of their maps a second.
    fn again(&self, tries: u32, since: Duration) -> bool {
        tries < 3 && since >= Duration::from_secs(1)
    }

    fn tick(&mut self, ap: &mut AsyncioProcess, pid: u32, tally: &mut Tally, budget: usize) -> Option<(Vec<Seen>, usize)> {
        let got = ap.tick(budget);
        if let Some(n) = ap.pure_python.take() {
            tally.notes.push(format!("pid {pid}: asyncio.tasks.Task is {n}, not the C _asyncio.Task: its tasks are not read"));
        }
        tally.unreadable += std::mem::take(&mut ap.unreadable);
        got
    }
}
