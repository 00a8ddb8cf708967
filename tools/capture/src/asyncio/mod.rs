//! asyncio tasks seen from outside: a thread of the capture samples the
//! tasks of each CPython 3.11-3.15 process among the targets at a fixed
//! rate, from the interpreter's own objects (no BPF, no code in the
//! program): each pending Task's await chain, from its coroutine down to
//! the innermost awaiting one, and its state (waiting on a future, ready
//! to resume, running). Task-time per stack is a sampled view beside the
//! exact per-thread accounting, written to a side file of its own
//! (`--tasks FILE`: FILE the folded lines, FILE.report the TASKS
//! section), never into the stream's totals.

mod batch;
mod chain;
mod layout;
mod objects;
mod process;
mod tally;

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use process::AsyncioProcess;
pub use tally::Tally;

/// Tasks read per process per tick, at most: past it a rotating subset
/// is read, each standing for its share.
pub const BUDGET: usize = 1000;

pub struct Sampler {
    pids: Arc<Mutex<Vec<u32>>>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<()>>,
}

impl Sampler {
    /// Sample at `hz` into `out` (written by [`Sampler::finish`]); FILE
    /// is created now, so that one that cannot be fails the capture at
    /// its start.
    pub fn start(hz: u64, out: &Path) -> Result<Sampler> {
        std::fs::File::create(out).with_context(|| format!("--tasks: creating {}", out.display()))?;
        let pids = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s, out) = (pids.clone(), stop.clone(), out.to_path_buf());
        let hz = hz.clamp(1, 1000);
        let thread = std::thread::Builder::new().name("tasks".into()).spawn(move || write(run(hz, &p, &s), &out)).expect("spawning the task sampler");
        Ok(Sampler { pids, stop, thread })
    }

    /// The target processes now (Python or not: the sampler finds out).
    pub fn targets(&self, pids: &[u32], more: &[u32]) {
        let mut v = [pids, more].concat();
        v.sort_unstable();
        v.dedup();
        *self.pids.lock().unwrap() = v;
    }

    /// Stop and write the folded file and its report.
    pub fn finish(self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().map_err(|_| anyhow::anyhow!("the task sampler panicked"))?
    }
}

fn write(tally: Tally, out: &Path) -> Result<()> {
    let mut f = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    tally.write_folded(&mut f)?;
    let report = PathBuf::from(format!("{}.report", out.display()));
    let mut r = std::fs::File::create(&report).with_context(|| format!("creating {}", report.display()))?;
    if !tally.procs.is_empty() || !tally.notes.is_empty() {
        tally.write_report(&mut r)?;
    }
    Ok(())
}

/// A target: its executable (device, inode), its asyncio reader if it
/// runs a CPython this reads, when that was last looked for and how many
/// times (a process just exec'd may not have mapped its libpython yet:
/// looked for again a second later, three times at most, so that a
/// thousand other processes do not cost a read of their maps a second).
type Entry = ((u64, u64), Option<AsyncioProcess>, Instant, u32);

fn run(hz: u64, pids: &Mutex<Vec<u32>>, stop: &AtomicBool) -> Tally {
    let period = Duration::from_nanos(1_000_000_000 / hz);
    let mut tally = Tally::new(hz, BUDGET);
    let mut procs: HashMap<u32, Entry> = HashMap::new();
    let began = Instant::now();
    let mut last = began;
    let mut next = began;
    while !stop.load(Ordering::Relaxed) {
        next += period;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now; // late (a loaded machine): a period from now
        }
        let t0 = Instant::now();
        let cpu0 = thread_cpu_ns();
        let dt_us = if tally.ticks == 0 { period.as_secs_f64() * 1e6 } else { t0.duration_since(last).as_secs_f64() * 1e6 };
        last = t0;
        let now_us = t0.duration_since(began).as_secs_f64() * 1e6;
        let targets = pids.lock().unwrap().clone();
        procs.retain(|p, _| targets.contains(p));
        let mut subset = false;
        // A process known not to run Python is looked at again (an exec)
        // once a second, unless there are few targets.
        let second = tally.ticks.is_multiple_of(hz) || targets.len() <= 64;
        for &pid in &targets {
            if !second && procs.get(&pid).is_some_and(|e| e.1.is_none()) {
                continue;
            }
            let Ok(meta) = std::fs::metadata(format!("/proc/{pid}/exe")) else { continue };
            let ident = (meta.dev(), meta.ino());
            let e = procs.entry(pid).or_insert(((0, 0), None, t0, 0));
            if e.0 != ident {
                *e = (ident, python(pid), t0, 1);
            } else if e.1.is_none() && e.3 < 3 && t0.duration_since(e.2) >= Duration::from_secs(1) {
                *e = (ident, python(pid), t0, e.3 + 1);
            }
            let Some(ap) = e.1.as_mut() else { continue };
            let got = ap.tick(BUDGET);
            if let Some(n) = ap.pure_python.take() {
                tally.notes.push(format!("pid {pid}: asyncio.tasks.Task is {n}, not the C _asyncio.Task: its tasks are not read"));
            }
            tally.unreadable += std::mem::take(&mut ap.unreadable);
            let Some((seen, all)) = got else { continue };
            let scale = if all > BUDGET { all as f64 / BUDGET as f64 } else { 1.0 };
            subset |= all > BUDGET;
            let name = crate::procfs::comm(pid, pid).unwrap_or_default();
            tally.add(pid, &name, &seen, all, tally::Tick { now_us, dt_us, scale });
        }
        tally.sampled_us += dt_us;
        tally.ticks += 1;
        tally.subset_ticks += subset as u64;
        // Its own CPU time: on a loaded machine a tick's wall time is
        // mostly waiting for a CPU.
        let ns = thread_cpu_ns().saturating_sub(cpu0);
        tally.tick_ns_total += ns;
        tally.tick_ns_max = tally.tick_ns_max.max(ns);
    }
    tally
}

/// The asyncio reader of `pid`, if it runs a CPython whose tasks this
/// reads (asyncio itself is looked for at each tick until imported).
fn python(pid: u32) -> Option<AsyncioProcess> {
    let it = crate::runtimes::python::reader::Interpreter::find(pid).ok()?;
    let lay = match layout::for_minor(it.offsets.minor) {
        Some(l) => *l,
        None => layout::from_debug(it.offsets.minor, &it.debug_table()?)?,
    };
    Some(AsyncioProcess::new(it, lay))
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
