//! Samplers that read a runtime's own state from outside at a fixed rate,
//! on a thread of the capture, beside the exact per-thread accounting:
//! Go's goroutines (goroutines/) and CPython's asyncio tasks (asyncio/).
//! Time per stack is a sampled view written to a side file of its own
//! (`--goroutines FILE`, `--tasks FILE`: FILE the folded lines,
//! FILE.report the section of the report), never into the stream's
//! totals. Each sampler is a [`Source`]: how a process is found and read
//! at a tick; the thread, the tick loop, the tally and the cost budget
//! are shared here.

pub mod asyncio;
pub mod goroutines;
pub mod tally;

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use tally::{Kind, Seen, Tally};

/// What one sampler reads.
pub trait Source {
    /// One process's reader.
    type Proc;
    /// Goroutines or tasks read per process per tick, at most: past it a
    /// rotating subset is read, each standing for its share. The sampler
    /// reads fewer when they cost more than [`CPU_SHARE`] (see [`Budget`]).
    const BUDGET: usize;
    const KIND: &'static Kind;
    /// The reader of `pid` (its executable `ident`), if it runs the runtime.
    fn find(&mut self, pid: u32, ident: (u64, u64)) -> Option<Self::Proc>;
    /// Whether a process not found after `tries` looks, the last one
    /// `since` ago, is looked at again (a process just exec'd may not
    /// have mapped its runtime yet).
    fn again(&self, _tries: u32, _since: Duration) -> bool {
        false
    }
    /// One tick of `p`, reading at most `budget`: what it read and how
    /// many there are; notes and failed reads go into `tally`.
    fn tick(&mut self, p: &mut Self::Proc, pid: u32, tally: &mut Tally, budget: usize) -> Option<(Vec<Seen>, usize)>;
}

pub struct Sampler {
    pids: Arc<Mutex<Vec<u32>>>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<()>>,
    unit: &'static str,
}

impl Sampler {
    /// Sample at `hz` into `out` (written by [`Sampler::finish`]) with the
    /// source `make` makes on the sampler's thread; `flag` names `out` in
    /// an error. FILE is created now: one that cannot be fails the
    /// capture before it starts, not at its end. With `quiet`, the report
    /// is left empty when there was nothing to say.
    pub fn start<S: Source + 'static>(flag: &str, hz: u64, out: &Path, quiet: bool, make: impl FnOnce() -> S + Send + 'static) -> Result<Sampler> {
        std::fs::File::create(out).with_context(|| format!("{flag}: creating {}", out.display()))?;
        let pids = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s, out) = (pids.clone(), stop.clone(), out.to_path_buf());
        let hz = hz.clamp(1, 1000);
        let unit = S::KIND.unit;
        let name = format!("{unit}s");
        let body = move || write(run(make(), hz, &p, &s), &out, quiet);
        let thread = std::thread::Builder::new().name(name).spawn(body).unwrap_or_else(|_| panic!("spawning the {unit} sampler"));
        Ok(Sampler { pids, stop, thread, unit })
    }

    /// The target processes now (running the runtime or not: the sampler
    /// finds out).
    pub fn targets(&self, pids: &[u32], more: &[u32]) {
        let mut v = [pids, more].concat();
        v.sort_unstable();
        v.dedup();
        *self.pids.lock().unwrap() = v;
    }

    /// Stop and write the folded file and its report.
    pub fn finish(self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().map_err(|_| anyhow::anyhow!("the {} sampler panicked", self.unit))?
    }
}

fn write(tally: Tally, out: &Path, quiet: bool) -> Result<()> {
    let mut f = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    tally.write_folded(&mut f)?;
    let report = PathBuf::from(format!("{}.report", out.display()));
    let mut r = std::fs::File::create(&report).with_context(|| format!("creating {}", report.display()))?;
    if !quiet || !tally.procs.is_empty() || !tally.notes.is_empty() {
        tally.write_report(&mut r)?;
    }
    Ok(())
}

/// A target: its executable (device, inode), its reader if it runs the
/// runtime, when that was last looked for and how many times.
type Entry<P> = ((u64, u64), Option<P>, Instant, u32);

fn run<S: Source>(mut src: S, hz: u64, pids: &Mutex<Vec<u32>>, stop: &AtomicBool) -> Tally {
    let period = Duration::from_nanos(1_000_000_000 / hz);
    let mut tally = Tally::new(S::KIND, hz, S::BUDGET);
    let mut budget = Budget::new(S::BUDGET, period);
    let mut procs: HashMap<u32, Entry<S::Proc>> = HashMap::new();
    let began = Instant::now();
    let mut last = began;
    let mut next = began;
    while !stop.load(Ordering::Relaxed) {
        next += period;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            // Late (a loaded machine): the next tick a period from now.
            next = now;
        }
        let t0 = Instant::now();
        let cpu0 = crate::runtimes::cost::now();
        let dt_us = if tally.ticks == 0 { period.as_secs_f64() * 1e6 } else { t0.duration_since(last).as_secs_f64() * 1e6 };
        last = t0;
        let now_us = t0.duration_since(began).as_secs_f64() * 1e6;
        let targets = pids.lock().unwrap().clone();
        procs.retain(|p, _| targets.contains(p));
        let (read, subset) = tick(&mut src, &mut tally, &mut procs, &targets, tally::Tick { now_us, dt_us, scale: 1.0 }, t0, budget.each);
        tally.sampled_us += dt_us;
        tally.ticks += 1;
        tally.subset_ticks += subset as u64;
        // Its own CPU time: on a loaded machine the wall time of a tick is
        // mostly waiting for a CPU.
        let ns = crate::runtimes::cost::now().saturating_sub(cpu0);
        tally.tick_ns_total += ns;
        tally.tick_ns_max = tally.tick_ns_max.max(ns);
        budget.after(ns, read);
        tally.budget_least = tally.budget_least.min(budget.each);
    }
    tally
}

/// The share of one CPU a sampler keeps to: 1%, 0.2 ms a tick at
/// 49 Hz. Past it a rotating subset is read (each standing for its
/// share), so 10,000 goroutines cost a program what a few hundred do.
pub const CPU_SHARE: f64 = 0.01;

/// Read whole, whatever they cost: a program with this many goroutines
/// or tasks is never sampled in part.
const FLOOR: usize = 128;

/// How many to read per process at the next tick: as many as
/// [`CPU_SHARE`] of the period pays for at what each cost lately,
/// between [`FLOOR`] and the source's `BUDGET`.
struct Budget {
    each: usize,
    most: usize,
    period_ns: f64,
    /// CPU ns per one read, averaged over the last ticks; 0: none yet.
    ns_per: f64,
}

impl Budget {
    fn new(most: usize, period: Duration) -> Budget {
        Budget { each: most, most, period_ns: period.as_nanos() as f64, ns_per: 0.0 }
    }

    /// A tick took `ns` of CPU for `read` goroutines or tasks (of every
    /// target).
    fn after(&mut self, ns: u64, read: usize) {
        if read == 0 {
            return;
        }
        let per = ns as f64 / read as f64;
        self.ns_per = if self.ns_per == 0.0 { per } else { 0.75 * self.ns_per + 0.25 * per };
        let afford = (CPU_SHARE * self.period_ns / self.ns_per) as usize;
        self.each = afford.clamp(FLOOR.min(self.most), self.most);
    }
}

/// One tick of every target, reading at most `budget` of each: how many
/// were read, and whether one was read in part (a subset).
fn tick<S: Source>(src: &mut S, tally: &mut Tally, procs: &mut HashMap<u32, Entry<S::Proc>>, targets: &[u32], t: tally::Tick, t0: Instant, budget: usize) -> (usize, bool) {
    let (mut read, mut subset) = (0, false);
    // Few targets (a command, a pid): each looked at every tick, so that
    // a held command's exec of the runtime is seen at once. Else a process
    // known not to run it is looked at again (an exec) once a second.
    let second = tally.ticks.is_multiple_of(tally.hz) || targets.len() <= 64;
    for &pid in targets {
        if !second && procs.get(&pid).is_some_and(|e| e.1.is_none()) {
            continue;
        }
        let Ok(meta) = std::fs::metadata(format!("/proc/{pid}/exe")) else { continue };
        let ident = (meta.dev(), meta.ino());
        let e = procs.entry(pid).or_insert(((0, 0), None, t0, 0));
        if e.0 != ident {
            *e = (ident, src.find(pid, ident), t0, 1);
        } else if e.1.is_none() && src.again(e.3, t0.duration_since(e.2)) {
            *e = (ident, src.find(pid, ident), t0, e.3 + 1);
        }
        let Some(p) = e.1.as_mut() else { continue };
        let Some((seen, all)) = src.tick(p, pid, tally, budget) else { continue };
        let scale = if all > budget { all as f64 / budget as f64 } else { 1.0 };
        subset |= all > budget;
        read += seen.len();
        let name = crate::procfs::comm(pid, pid).unwrap_or_default();
        tally.add(pid, &name, &seen, all, tally::Tick { scale, ..t });
    }
    (read, subset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_reads_what_its_share_of_a_cpu_pays_for() {
        let period = Duration::from_millis(20);
        let mut b = Budget::new(2000, period);
        assert_eq!(b.each, 2000, "before any tick, the source's most");
        // 2000 read for 2 ms of CPU (1 us each): 1% of 20 ms pays for 200.
        b.after(2_000_000, 2000);
        assert_eq!(b.each, 200);
        // Cheap again (0.05 us each, averaged in): more, never past the most.
        for _ in 0..20 {
            b.after(10_000, 200);
        }
        assert_eq!(b.each, 2000);
        // Dear (10 us each): never below the floor.
        for _ in 0..20 {
            b.after(2_000_000, 200);
        }
        assert_eq!(b.each, FLOOR);
        // A tick that read nothing says nothing of the cost.
        b.after(5_000_000, 0);
        assert_eq!(b.each, FLOOR);
        // A source whose most is under the floor reads all of it.
        let mut small = Budget::new(100, period);
        small.after(100_000_000, 100);
        assert_eq!(small.each, 100);
    }
}
