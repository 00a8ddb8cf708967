//! Steal: time a thread held a CPU (switch-in to switch-out) that its own
//! CPU clock did not count, because the hypervisor ran something else on
//! the vCPU (on a kernel with CONFIG_IRQ_TIME_ACCOUNTING, interrupt time
//! too). It is part of the thread's on-CPU time; the samples are scaled to
//! the rest, so a function's share is the time it really ran.
//!
//! The BPF side measures every slice it saw begin (`se.sum_exec_runtime`
//! at switch-in and switch-out), and ends a slice where the kernel did
//! when that is before our stamp: a slice's steal is never more than the
//! steal the kernel took from its CPU's task clock over it (see
//! close_slice in bpf/capture.bpf.h). Two slices it cannot close alone are
//! measured here from `/proc/PID/task/TID/schedstat` readings: the slice a
//! thread was already running in at the start, and the one still open at
//! the stop. Such a reading of a running thread is as old as its last
//! scheduler tick, so those two slices can be off by up to one tick.

use crate::event::WcThread;
use crate::target::monotonic_ns;

/// A thread's CPU clock (ns it ran) read at a monotonic time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecClock {
    pub at_ns: u64,
    pub exec_ns: u64,
}

/// The CPU clock of a thread now, from `/proc/PID/task/TID/schedstat`.
pub fn read(pid: u32, tid: u32) -> Option<ExecClock> {
    let at_ns = monotonic_ns();
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    let exec_ns = s.split_whitespace().next()?.parse().ok()?;
    Some(ExecClock { at_ns, exec_ns })
}

/// Steal of one thread over the window ending at `end`, given the readings
/// at the start and at the stop (when it was a thread of a target process
/// then): the wall time of every slice measured less what its CPU clock
/// counted in them, summed before the difference is taken (per slice, the
/// two clocks' jitter goes both ways). Never more than its on-CPU time
/// `on_ns` (including the slice open at the stop).
pub fn thread_steal(th: &WcThread, end: u64, on_ns: u64, at_start: Option<ExecClock>, at_stop: Option<ExecClock>) -> u64 {
    let (mut wall, mut exec) = (th.slice_wall_ns, th.slice_exec_ns);
    let mut add = |a: ExecClock, b: ExecClock| {
        wall += b.at_ns.saturating_sub(a.at_ns);
        exec += b.exec_ns.saturating_sub(a.exec_ns);
    };
    // Running at the start, first switched out at first_out.
    if let Some(s) = at_start.filter(|s| th.first_out > s.at_ns) {
        add(s, ExecClock { at_ns: th.first_out, exec_ns: th.first_exec });
    }
    let open = th.exit_ns == 0 && th.running != 0 && th.last_ts < end;
    if let (true, Some(stop)) = (open, at_stop) {
        let base = if th.exec_known != 0 {
            Some(ExecClock { at_ns: th.last_ts, exec_ns: th.exec_base })
        } else if th.first_out == 0 {
            at_start // running through the whole window
        } else {
            None
        };
        // The clock is read after the stop, and the slice ends at the
        // stop: between the two the thread may have blocked (its wall
        // since the stop is no steal: measured to the reading, a thread
        // that slept after the stop had its sleep claimed as steal, 119 ms
        // against the machine's 40 in a system-wide capture) or run on
        // (its clock then counts past the stop). So only the slice's own
        // wall is compared, with the clock capped to it, and the clock
        // may lag a tick behind (it is read as of the last tick): steal
        // in an open slice is at least what is claimed here, never less.
        if let Some(b) = base.filter(|b| end > b.at_ns) {
            let slice = end - b.at_ns;
            wall += slice;
            exec += stop.exec_ns.saturating_sub(b.exec_ns).saturating_add(TICK_NS).min(slice);
        }
    }
    wall.saturating_sub(exec).min(on_ns)
}

/// The machine's steal, interrupt and softirq time so far, all CPUs (ns,
/// whole USER_HZ ticks), from /proc/stat: the time its tasks' CPU clocks
/// do not count (interrupt time only with CONFIG_IRQ_TIME_ACCOUNTING).
pub fn machine_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let f: Vec<u64> = stat.lines().next()?.split_whitespace().skip(1).map(|v| v.parse().unwrap_or(0)).collect();
    // user nice system idle iowait irq softirq steal
    let ticks = f.get(5)? + f.get(6)? + f.get(7)?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some(ticks * (1_000_000_000 / if hz > 0 { hz as u64 } else { 100 }))
}

/// Scale `steals` down so that they sum to `machine` at most: no thread
/// lost more to the hypervisor than the whole machine did. A closed
/// slice's steal is at most its CPU's (bpf/capture.bpf.h, close_slice),
/// so this rarely acts now; it bounds the first and last slices, measured
/// here from /proc readings, and /proc/stat's whole ticks. Before the
/// slices were bounded, the interval between a wake-up preemption and
/// its switch was claimed as the preempted thread's steal: over a
/// system-wide capture's threads, 30.8 ms against the machine's 20 ms.
pub fn cap(steals: &mut [&mut u64], machine: u64) {
    let sum: u128 = steals.iter().map(|s| **s as u128).sum();
    if sum <= machine as u128 {
        return;
    }
    for s in steals.iter_mut() {
        **s = (**s as u128 * machine as u128 / sum) as u64;
    }
}

/// `WALLCLOCK_STEAL_STATS=1`: the threads' closed slices summed, on our
/// stamps and on the kernel's clocks, against the machine's steal.
pub fn debug_sums(tool: &str, threads: &[(u32, WcThread)], machine: (Option<u64>, Option<u64>)) {
    let (mut wall, mut exec, mut ksteal, mut kwall, mut n) = (0u128, 0u128, 0u128, 0u128, 0u64);
    for (_, t) in threads {
        wall += t.slice_wall_ns as u128;
        exec += t.slice_exec_ns as u128;
        ksteal += t.slice_steal_ns as u128;
        kwall += t.slice_kwall_ns as u128;
        n += 1;
    }
    let m = machine.1.unwrap_or(0).saturating_sub(machine.0.unwrap_or(0));
    let ms = |v: u128| v as f64 / 1e6;
    let mut odd: Vec<&(u32, WcThread)> = threads.iter().collect();
    odd.sort_by_key(|(_, t)| std::cmp::Reverse((t.slice_kwall_ns as i128 - t.slice_wall_ns as i128).unsigned_abs()));
    for (tid, t) in odd.iter().take(4) {
        // c_char is i8 on x86-64, u8 on arm64.
        #[allow(clippy::unnecessary_cast)]
        let comm = String::from_utf8_lossy(&t.comm.iter().map(|c| *c as u8).take_while(|c| *c != 0).collect::<Vec<u8>>()).into_owned();
        eprintln!("{tool}: steal stats: {tid} {comm}: wall {} clock {} kwall {} ksteal {} on {}", t.slice_wall_ns, t.slice_exec_ns, t.slice_kwall_ns, t.slice_steal_ns, t.on_ns);
    }
    eprintln!(
        "{tool}: steal stats: {n} threads; slices' wall {:.3} ms, clock {:.3} ms, wall - clock {:.3} ms; kernel's wall {:.3} ms, kernel's steal {:.3} ms; machine {:.3} ms",
        ms(wall),
        ms(exec),
        ms(wall) - ms(exec),
        ms(kwall),
        ms(ksteal),
        m as f64 / 1e6
    );
}

/// [`cap`] over the thread records of a stream (a capture, a window).
pub fn cap_records(records: &mut [wallclock_stream::Record], machine: u64) {
    let mut steals: Vec<&mut u64> = records
        .iter_mut()
        .filter_map(|r| match r {
            wallclock_stream::Record::Thread(t) => t.steal_ns.as_mut(),
            _ => None,
        })
        .collect();
    cap(&mut steals, machine);
}

/// How late the CPU clock of a running thread may be when read: the
/// kernel adds a running task's time at ticks (HZ 100 at the least).
const TICK_NS: u64 = 10_000_000;

/// The slice a thread is in at the stop, `[last_ts, end)`, split into
/// (on-CPU, off-CPU): on-CPU, unless its CPU clock read after the stop
/// counted less than that, by more than a tick, since the slice began.
/// Then its switch-out was not seen (it happens: see unseen_in in
/// bpf/capture.bpf.h) and it ran only what its clock says; the rest it
/// was off-CPU, where is unknown. Without this a thread whose last
/// switch-out was missed "ran" until the stop: seconds, for an idle one.
pub fn open_slice(th: &WcThread, end: u64, at_stop: Option<ExecClock>) -> (u64, u64) {
    let d = end.saturating_sub(th.last_ts);
    // The clock when the slice began: its switch-in, or the snapshot at
    // the start for a thread running then and never switched since.
    let base = (th.exec_known != 0 || th.first_out == 0).then_some(th.exec_base);
    match (base, at_stop) {
        (Some(b), Some(s)) if b > 0 || th.exec_known != 0 => {
            let on = d.min(s.exec_ns.saturating_sub(b).saturating_add(TICK_NS));
            (on, d - on)
        }
        _ => (d, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(at_ns: u64, exec_ns: u64) -> ExecClock {
        ExecClock { at_ns, exec_ns }
    }

    #[test]
    fn closed_slices_only() {
        let th = WcThread { slice_wall_ns: 100, slice_exec_ns: 93, on_ns: 100, ..Default::default() };
        assert_eq!(thread_steal(&th, 1000, 100, None, None), 7);
        // A clock a little ahead over the sum is no steal (nor negative).
        let th = WcThread { slice_wall_ns: 100, slice_exec_ns: 101, on_ns: 100, ..Default::default() };
        assert_eq!(thread_steal(&th, 1000, 100, None, None), 0);
    }

    #[test]
    fn first_slice_from_the_start_reading() {
        // Ran from 100 to 400 (300 ns wall) but its clock advanced 250.
        let th = WcThread { first_out: 400, first_exec: 1250, on_ns: 300, ..Default::default() };
        assert_eq!(thread_steal(&th, 1000, 300, Some(clock(100, 1000)), None), 50);
        // A reading taken after the first switch-out says nothing of it.
        assert_eq!(thread_steal(&th, 1000, 300, Some(clock(500, 1000)), None), 0);
    }

    #[test]
    fn open_slice_at_the_stop() {
        let ms = 1_000_000;
        // Switched in at 600 ms with clock 2000 ms; at the stop (1000 ms,
        // read at 1001 ms) the clock says 2300 ms: 100 ms of the slice's
        // wall not run, less the tick the reading may lag.
        let th = WcThread { running: 1, exec_known: 1, last_ts: 600 * ms, exec_base: 2000 * ms, ..Default::default() };
        assert_eq!(thread_steal(&th, 1000 * ms, 400 * ms, None, Some(clock(1001 * ms, 2300 * ms))), 100 * ms - TICK_NS);
        // Never switched in the window: start to stop readings.
        let th = WcThread { running: 1, last_ts: 0, ..Default::default() };
        assert_eq!(thread_steal(&th, 1000 * ms, 1000 * ms, Some(clock(10 * ms, 0)), Some(clock(1000 * ms, 900 * ms))), 90 * ms - TICK_NS);
        // Clamped to the on-CPU time.
        assert_eq!(thread_steal(&th, 1000 * ms, 20 * ms, Some(clock(10 * ms, 0)), Some(clock(1000 * ms, 900 * ms))), 20 * ms);
    }

    #[test]
    fn time_after_the_stop_is_no_steal() {
        let ms = 1_000_000;
        // Running from 900 ms to the stop at 1000 ms, every ns of it (the
        // clock moved 100 ms by then), then asleep until the clock is read
        // at 1200 ms: no steal. Measured to the reading it was 200 ms.
        let th = WcThread { running: 1, exec_known: 1, last_ts: 900 * ms, exec_base: 5000 * ms, ..Default::default() };
        assert_eq!(thread_steal(&th, 1000 * ms, 100 * ms, None, Some(clock(1200 * ms, 5100 * ms))), 0);
        // Ran on after the stop: the clock counts past it, still no steal.
        assert_eq!(thread_steal(&th, 1000 * ms, 100 * ms, None, Some(clock(1200 * ms, 5290 * ms))), 0);
    }

    #[test]
    fn open_slice_bounded_by_the_clock() {
        // Switched in at 1 s with clock 5 s; read after the stop at 3 s:
        // the clock moved 0.2 s, so 1.8 s of the 2 s were not on-CPU.
        let th = WcThread { running: 1, exec_known: 1, last_ts: 1_000_000_000, exec_base: 5_000_000_000, ..Default::default() };
        let (on, off) = open_slice(&th, 3_000_000_000, Some(clock(3_010_000_000, 5_200_000_000)));
        assert_eq!((on, off), (200_000_000 + TICK_NS, 1_800_000_000 - TICK_NS));
        // A thread that ran all along keeps its slice, its clock a tick late.
        let (on, off) = open_slice(&th, 3_000_000_000, Some(clock(3_000_000_000, 6_995_000_000)));
        assert_eq!((on, off), (2_000_000_000, 0));
        // No reading: the slice as the switches say.
        assert_eq!(open_slice(&th, 3_000_000_000, None), (2_000_000_000, 0));
    }

    #[test]
    fn capped_to_the_machine() {
        let (mut a, mut b) = (30u64, 10u64);
        cap(&mut [&mut a, &mut b], 20);
        assert_eq!((a, b), (15, 5));
        let (mut a, mut b) = (3u64, 1u64);
        cap(&mut [&mut a, &mut b], 20);
        assert_eq!((a, b), (3, 1));
    }

    #[test]
    fn slices_jitter_both_ways() {
        // One slice's clock ahead by 5, the first slice's behind by 5.
        let th = WcThread { slice_wall_ns: 100, slice_exec_ns: 105, first_out: 400, first_exec: 295, ..Default::default() };
        assert_eq!(thread_steal(&th, 1000, 400, Some(clock(100, 0)), None), 0);
    }
}
