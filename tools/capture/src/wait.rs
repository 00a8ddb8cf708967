//! Waiting for `--prepare` and `--activate` (see [`crate::when`]): said on
//! stderr, ended early by Ctrl-C, and for the activation precise on a
//! loaded machine. Captures on several hosts told `--activate /5s` are
//! meant to start together: on a machine whose CPUs are all busy a woken
//! thread of the normal class can wait tens of milliseconds for one, so
//! the last stretch of the wait, and the start itself (the window written
//! into the BPF side), run in the realtime class, at its lowest priority,
//! for a millisecond or so. Where that is not allowed, the wait is the
//! same without it.

use std::time::Duration;

use anyhow::{bail, Result};

use crate::target::monotonic_ns;
use crate::realtime::{local_time, realtime_ns};
use crate::when::Schedule;

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

/// Wait until realtime `at`, saying on stderr what for; None when Ctrl-C
/// came first. Slept on CLOCK_MONOTONIC (the deadline taken from the
/// realtime distance now); the last [`BOOSTED_NS`] with `boost`, whose
/// guard the caller drops once the phase has begun.
fn wait_until(tool: &str, phase: &str, at: u64, boost: bool) -> Option<Boost> {
    let now = realtime_ns();
    if at <= now {
        return Some(Boost(None));
    }
    eprintln!("{tool}: waiting for {phase} at {} (in {:.3} s)", local_time(at), (at - now) as f64 / 1e9);
    let deadline = monotonic_ns() + (at - now);
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
    if wait_until(tool, "preparation", s.prepare_at, false).is_none() {
        bail!("interrupted while waiting for preparation: nothing captured");
    }
    Ok(())
}

/// Wait for the activation, once prepared; a preparation that took past
/// it is said (the window then opens late, at its true start). Drop the
/// guard once the window is open.
pub fn activate(tool: &str, s: &Schedule) -> Result<Boost> {
    let late = realtime_ns().saturating_sub(s.activate_at);
    if s.activate.is_some() && late > 1_000_000 {
        eprintln!("{tool}: warning: preparing took past the activation time: recording starts {:.3} s late", late as f64 / 1e9);
    }
    match wait_until(tool, "activation", s.activate_at, true) {
        Some(g) => Ok(g),
        None => bail!("interrupted while waiting for activation: nothing captured"),
    }
}
