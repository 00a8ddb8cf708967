//! Goroutines seen from outside: a thread of the capture samples the
//! goroutines of each Go process among the targets at a fixed rate, from
//! the runtime's own state (no BPF): each one's status or wait reason and,
//! for one not running, the stack it parked with. Goroutine-time per stack
//! is a sampled view beside the exact per-thread accounting, written to a
//! side file of its own (`--goroutines FILE`: FILE the folded lines,
//! FILE.report the GOROUTINES section), never into the stream's totals.

mod layout;
mod process;
mod reasons;
mod tally;

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use layout::Layout;
use process::GoProcess;
pub use tally::Tally;

/// Goroutines read per process per tick, at most: past it a rotating
/// subset is read, each standing for its share (a process with 100k
/// goroutines costs as much as one with this many).
pub const BUDGET: usize = 2000;

pub struct Sampler {
    pids: Arc<Mutex<Vec<u32>>>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<()>>,
}

impl Sampler {
    /// Sample at `hz` into `out` (written by [`Sampler::finish`]).
    /// FILE is created now: one that cannot be fails the capture before
    /// it starts, not its end.
    pub fn start(tool: &'static str, hz: u64, out: &Path) -> Result<Sampler> {
        std::fs::File::create(out).with_context(|| format!("--goroutines: creating {}", out.display()))?;
        let pids = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s, out) = (pids.clone(), stop.clone(), out.to_path_buf());
        let hz = hz.clamp(1, 1000);
        let thread = std::thread::Builder::new().name("goroutines".into()).spawn(move || write(run(tool, hz, &p, &s), &out)).expect("spawning the goroutine sampler");
        Ok(Sampler { pids, stop, thread })
    }

    /// The target processes now (Go or not: the sampler finds out).
    pub fn targets(&self, pids: &[u32], more: &[u32]) {
        let mut v = [pids, more].concat();
        v.sort_unstable();
        v.dedup();
        *self.pids.lock().unwrap() = v;
    }

    /// Stop and write the folded file and its report.
    pub fn finish(self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().map_err(|_| anyhow::anyhow!("the goroutine sampler panicked"))?
    }
}

fn write(tally: Tally, out: &Path) -> Result<()> {
    let mut f = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    tally.write_folded(&mut f)?;
    let report = PathBuf::from(format!("{}.report", out.display()));
    let mut r = std::fs::File::create(&report).with_context(|| format!("creating {}", report.display()))?;
    tally.write_report(&mut r)?;
    Ok(())
}

/// Go binaries by (device, inode), read once.
type Binaries = HashMap<(u64, u64), Option<Rc<Layout>>>;

fn run(tool: &str, hz: u64, pids: &Mutex<Vec<u32>>, stop: &AtomicBool) -> Tally {
    let period = Duration::from_nanos(1_000_000_000 / hz);
    let mut tally = Tally::new(hz, BUDGET);
    let mut unwind = crate::unwind::Unwind::new();
    let mut bins: Binaries = HashMap::new();
    let mut procs: HashMap<u32, ((u64, u64), Option<GoProcess>)> = HashMap::new();
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
        let cpu0 = thread_cpu_ns();
        let dt_us = if tally.ticks == 0 { period.as_secs_f64() * 1e6 } else { t0.duration_since(last).as_secs_f64() * 1e6 };
        last = t0;
        let now_us = t0.duration_since(began).as_secs_f64() * 1e6;
        let targets = pids.lock().unwrap().clone();
        procs.retain(|p, _| targets.contains(p));
        let mut subset = false;
        // Few targets (a command, a pid): each looked at every tick, so
        // that a held command's exec of a Go binary is seen at once.
        let second = tally.ticks.is_multiple_of(hz) || targets.len() <= 64;
        for &pid in &targets {
            // Else a process known not to run Go is looked at again (an
            // exec) once a second; a Go one at every tick.
            if !second && procs.get(&pid).is_some_and(|e| e.1.is_none()) {
                continue;
            }
            let Ok(meta) = std::fs::metadata(format!("/proc/{pid}/exe")) else { continue };
            let ident = (meta.dev(), meta.ino());
            let e = procs.entry(pid).or_insert(((0, 0), None));
            if e.0 != ident {
                *e = (ident, go_process(tool, pid, ident, &mut bins));
            }
            let Some(gp) = e.1.as_mut() else { continue };
            let Some((seen, all)) = gp.tick(&mut unwind, BUDGET) else { continue };
            let scale = if all > BUDGET { all as f64 / BUDGET as f64 } else { 1.0 };
            subset |= all > BUDGET;
            let name = crate::procfs::comm(pid, pid).unwrap_or_default();
            tally.add(pid, &name, &seen, all, tally::Tick { now_us, dt_us, scale });
            tally.unreadable += std::mem::take(&mut gp.unreadable);
        }
        tally.sampled_us += dt_us;
        tally.ticks += 1;
        tally.subset_ticks += subset as u64;
        // Its own CPU time: on a loaded machine the wall time of a tick is
        // mostly waiting for a CPU.
        let ns = thread_cpu_ns().saturating_sub(cpu0);
        tally.tick_ns_total += ns;
        tally.tick_ns_max = tally.tick_ns_max.max(ns);
    }
    tally
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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
