//! The two clocks the tools relate: CLOCK_MONOTONIC (the stream's, the
//! BPF side's) and CLOCK_REALTIME (dates, `--activate` times, pprof's
//! `timeNanos`), and a pair of them read together.

fn now(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a timespec to write into.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC now, ns: the clock the BPF side and the stream use.
pub fn monotonic_ns() -> u64 {
    now(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME, ns since the epoch.
pub fn realtime_ns() -> u64 {
    now(libc::CLOCK_REALTIME)
}

/// A pair of readings (CLOCK_MONOTONIC, CLOCK_REALTIME) taken together:
/// the realtime clock read between two monotonic reads, the tightest of
/// five such brackets kept (a preemption between two plain reads on a
/// loaded machine or a busy hypervisor puts milliseconds between them),
/// the monotonic reading at the middle of its bracket.
pub fn clock_pair() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..5 {
        let a = monotonic_ns();
        let r = realtime_ns();
        let b = monotonic_ns();
        if b - a < best.0 {
            best = (b - a, a + (b - a) / 2, r);
        }
    }
    (best.1, best.2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_agrees_with_plain_reads() {
        let m0 = monotonic_ns();
        let r0 = realtime_ns();
        let (m, r) = clock_pair();
        let (m1, r1) = (monotonic_ns(), realtime_ns());
        assert!(m0 <= m && m <= m1 && r0 <= r + 1_000_000 && r <= r1 + 1_000_000);
    }
}
