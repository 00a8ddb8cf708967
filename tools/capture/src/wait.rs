//! Waiting for `--prepare` and `--activate` (see [`crate::when`]): said on
//! stderr, ended early by Ctrl-C, and for the activation precise on a
//! loaded machine. Captures on several hosts told `--activate /5s` are
//! meant to start together: on a machine whose CPUs are all busy a woken
//! thread of the normal class can wait tens of milliseconds for one, so
//! the last stretch of the wait, and the start itself (the window written
//! into the BPF side), run in the realtime class, at its lowest priority,
//! for a millisecond or so. Where that is not allowed, the wait is the
//! same without it.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::target::monotonic_ns;
use crate::realtime::{clock_pair, local_time, monotonic_of};
use crate::when::{Schedule, WhenArgs};

/// The stretch before a deadline slept in the realtime class.
const BOOSTED_NS: u64 = 20_000_000;

/// The thread in SCHED_FIFO until dropped, then in its own policy again.
pub struct Boost(Option<(i32, libc::sched_param)>);

impl Boost {
    fn start() -> Boost {
        // SAFETY: plain calls on the calling thread (pid 0) with valid params.
        unsafe {
            let policy = libc::sched_getscheduler(0);
            let mut old: libc::sched_param = std::mem::zeroed();
            if policy < 0 || libc::sched_getparam(0, &mut old) != 0 {
                return Boost(None);
            }
            let fifo = libc::sched_param { sched_priority: 1 };
            if policy == libc::SCHED_FIFO || libc::sched_setscheduler(0, libc::SCHED_FIFO, &fifo) != 0 {
                return Boost(None);
            }
            Boost(Some((policy, old)))
        }
    }
}

impl Drop for Boost {
    fn drop(&mut self) {
        if let Some((policy, old)) = self.0.take() {
            // SAFETY: restores the calling thread's own earlier policy.
            unsafe { libc::sched_setscheduler(0, policy, &old) };
        }
    }
}

/// Sleep until CLOCK_MONOTONIC `deadline` (an absolute sleep: no drift).
fn sleep_until(deadline: u64) {
    let ts = libc::timespec { tv_sec: (deadline / 1_000_000_000) as _, tv_nsec: (deadline % 1_000_000_000) as _ };
    // SAFETY: ts is valid; an interrupted sleep is taken up by the caller's loop.
    unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
}

/// Wait until CLOCK_MONOTONIC `deadline`, saying on stderr what for
/// (`say`, with the realtime `real` it stands for); None when Ctrl-C came
/// first. The last [`BOOSTED_NS`] with `boost`, whose guard the caller
/// drops once the phase has begun.
fn wait_mono(tool: &str, phase: &str, deadline: u64, real: u64, boost: bool, say: bool) -> Option<Boost> {
    let now = monotonic_ns();
    if deadline <= now {
        return Some(Boost(None));
    }
    if say {
        eprintln!("{tool}: waiting for {phase} at {} (in {:.3} s)", local_time(real), (deadline - now) as f64 / 1e9);
    }
    let mut guard = Boost(None);
    loop {
        if crate::signal::stopped() {
            return None;
        }
        let left = deadline.saturating_sub(monotonic_ns());
        if left == 0 {
            return Some(guard);
        }
        if left > BOOSTED_NS {
            std::thread::sleep(Duration::from_nanos(left - BOOSTED_NS).min(Duration::from_millis(50)));
            continue;
        }
        if boost && guard.0.is_none() {
            guard = Boost::start();
        }
        // Ctrl-C interrupts the sleep (the handler has no SA_RESTART).
        sleep_until(deadline);
    }
}

/// Wait for the preparation.
pub fn prepare(tool: &str, s: &Schedule) -> Result<()> {
    if wait_mono(tool, "preparation", monotonic_of(s.prepare_at), s.prepare_at, false, true).is_none() {
        bail!("interrupted while waiting for preparation: nothing captured");
    }
    Ok(())
}

/// Once prepared: the window's start, CLOCK_MONOTONIC ns. With
/// `--prepared-file`, that file is written first (the clocks now:
/// `MONOTONIC_NS REALTIME_NS`); the start is then the instant written into
/// `--activate-file` (waited for), or the `--activate` time, or now. A
/// start already past (a preparation that took past it, a file read
/// late) is said, and the window opens now, at its true start. The
/// window's start is written into the BPF side before it comes (the
/// programs ignore every event before it), so that two captures given
/// one instant open their windows at that very nanosecond, however late
/// either wakes for it; then [`open`] waits for it.
pub fn activation(tool: &str, s: &Schedule, w: &WhenArgs) -> Result<u64> {
    if let Some(p) = &w.prepared_file {
        let (m, r) = clock_pair();
        write_whole(p, &format!("{m} {r}\n")).with_context(|| format!("--prepared-file {}", p.display()))?;
    }
    let at = match (&w.activate_file, &s.activate) {
        (Some(f), _) => Some(from_file(f)?),
        (None, Some(_)) => Some(monotonic_of(s.activate_at)),
        (None, None) => None,
    };
    let now = monotonic_ns();
    match at {
        Some(t) if t > now => Ok(t),
        Some(t) => {
            if now - t > 1_000_000 {
                let why = if w.activate_file.is_some() { "the activation time was read" } else { "preparing took" };
                eprintln!("{tool}: warning: {why} past the activation time: recording starts {:.3} s late", (now - t) as f64 / 1e9);
            }
            Ok(now)
        }
        None => Ok(now),
    }
}

/// Wait for the window's start (from [`activation`]); said on stderr for
/// an `--activate` time. Drop the guard once the window is open.
pub fn open(tool: &str, start: u64, s: &Schedule) -> Result<Boost> {
    let real = s.activate_at.max(crate::realtime::realtime_of(start));
    match wait_mono(tool, "activation", start, real, true, s.activate.is_some()) {
        Some(g) => Ok(g),
        None => bail!("interrupted while waiting for activation: nothing captured"),
    }
}

/// `text` into `path` whole: written beside it, then renamed, so that a
/// reader polling for the file never reads half of it.
fn write_whole(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_file_name(format!(".{}.tmp", path.file_name().and_then(|n| n.to_str()).unwrap_or("file")));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// `--activate-file`: the CLOCK_MONOTONIC ns written into FILE, polled for
/// every millisecond in the realtime class (a woken thread of the normal
/// class waited tens of milliseconds for a CPU on a loaded machine: the
/// instant, written a little ahead, would have passed). Ctrl-C, or the
/// process that was to write it gone (this one's parent changed), ends
/// the wait: nothing is captured.
fn from_file(path: &Path) -> Result<u64> {
    let _boost = Boost::start();
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    loop {
        if crate::signal::stopped() {
            bail!("interrupted while waiting for activation: nothing captured");
        }
        match std::fs::read_to_string(path) {
            Ok(text) if text.ends_with('\n') => {
                return text.trim().parse::<u64>().map_err(|_| anyhow::anyhow!("--activate-file {}: {:?} is not a CLOCK_MONOTONIC time in ns", path.display(), text.trim()));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => bail!("--activate-file {}: {e}", path.display()),
        }
        // SAFETY: as above.
        if unsafe { libc::getppid() } != parent {
            bail!("--activate-file {}: the process that was to activate the capture is gone: nothing captured", path.display());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
