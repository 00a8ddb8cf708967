//! Goroutines seen from outside: the sampler (samplers/) reads the
//! goroutines of each Go process among the targets from the runtime's
//! own state (no BPF): each one's status or wait reason and, for one not
//! running, the stack it parked with (`--goroutines FILE`: FILE the
//! folded lines, FILE.report the GOROUTINES section).

mod layout;
mod process;
mod reasons;

use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

use anyhow::Result;

use super::tally::{Kind, Seen, Tally};
use super::{Sampler, Source};
use crate::unwind::Unwind;
use layout::Layout;
use process::GoProcess;

/// Goroutines read per process per tick, at most: past it a rotating
/// subset is read, each standing for its share (a process with 100k
/// goroutines costs as much as one with this many; fewer are read when
/// they cost more than the samplers' `CPU_SHARE`).
pub const BUDGET: usize = 2000;

/// How the GOROUTINES section names things.
static KIND: Kind = Kind {
    unit: "goroutine",
    title: "GOROUTINES (goroutine-seconds",
    unreadable: "goroutine reads failed (counted nowhere else)",
    columns: "state or wait reason      goroutine-s  mean   most",
    longest: "goroutines waiting longest (seen waiting at every sample of them):",
    busy: &[";[running]", ";[runnable]"],
    bare_leaf: false,
    prune: false,
    own,
};

/// The program's own function that waits, not the runtime's (package
/// `main`, or a path whose first element has a dot, as module paths do;
/// else the caller of the parking call).
fn own(stack: &str) -> &str {
    stack.rsplit(';').find(|f| f.starts_with("main.") || (f.contains('/') && f.split('/').next().is_some_and(|p| p.contains('.')))).or_else(|| stack.rsplit(';').nth(1)).unwrap_or(stack)
}

/// Sample the Go targets' goroutines at `hz` into `out`.
pub fn start(tool: &'static str, hz: u64, out: &Path) -> Result<Sampler> {
    Sampler::start("--goroutines", hz, out, false, move || Goroutines { tool, unwind: Unwind::new(), bins: HashMap::new() })
}

/// Go binaries by (device, inode), read once.
type Binaries = HashMap<(u64, u64), Option<Rc<Layout>>>;

struct Goroutines {
    tool: &'static str,
    /// Unwinds the stacks goroutines parked with.
    unwind: Unwind,
    bins: Binaries,
}

impl Source for Goroutines {
    type Proc = GoProcess;
    const BUDGET: usize = BUDGET;
    const KIND: &'static Kind = &KIND;

    fn find(&mut self, pid: u32, ident: (u64, u64)) -> Option<GoProcess> {
        go_process(self.tool, pid, ident, &mut self.bins)
    }

    fn tick(&mut self, gp: &mut GoProcess, _pid: u32, tally: &mut Tally, budget: usize) -> Option<(Vec<Seen>, usize)> {
        let got = gp.tick(&mut self.unwind, budget)?;
        tally.unreadable += std::mem::take(&mut gp.unreadable);
        Some(got)
    }
}

fn go_process(tool: &str, pid: u32, ident: (u64, u64), bins: &mut Binaries) -> Option<GoProcess> {
    let layout = bins
        .entry(ident)
        .or_insert_with(|| match Layout::read(Path::new(&format!("/proc/{pid}/exe"))) {
            Ok(l) => l.map(Rc::new),
            Err(e) => {
                eprintln!("{tool}: warning: goroutines of pid {pid} not sampled: {e:#}");
                None
            }
        })
        .clone()?;
    let bias = if layout.pie { pie_bias(pid, layout.base_vaddr)? } else { 0 };
    Some(GoProcess::new(pid, layout, bias))
}

/// Where a PIE executable was loaded: its first mapping's start less its
/// lowest link-time address.
fn pie_bias(pid: u32, base_vaddr: u64) -> Option<u64> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    maps.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let start = u64::from_str_radix(f.first()?.split('-').next()?, 16).ok()?;
        (f.len() >= 6 && f[2].trim_start_matches('0').is_empty() && Path::new(f[5]) == exe).then(|| start - base_vaddr)
    })
}
