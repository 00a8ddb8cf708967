//! One interval as a table: a row per thread (or per process), its
//! on-CPU, steal, runnable, sleeping and disk time and their shares of its
//! time alive in the interval, and the function it was blocked in longest.
//!
//! ON% is the time the thread ran: its on-CPU time (switch-in to
//! switch-out) less its steal, the part of it the hypervisor gave its
//! vCPU to another guest (or that interrupts took), which its own CPU
//! clock does not count either; STEAL% is that part.

use std::collections::HashMap;

use stacksym::Engine;
use wallclock_stream::accounting::sampled_on_ns;
use wallclock_stream::{Frame, Record, State};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SortKey {
    /// On-CPU time.
    On,
    /// Off-CPU time (runnable, sleeping, disk and other).
    Off,
    /// Runnable: waiting for a CPU.
    #[value(alias = "run", alias = "runq")]
    Runnable,
    /// Sleeping (S).
    #[value(alias = "sleeping", alias = "s")]
    Sleep,
    /// Disk (D, uninterruptible).
    #[value(alias = "io")]
    Disk,
    Tid,
    Name,
}

impl SortKey {
    /// The key that sorts by it in the live view.
    pub fn from_key(k: u8) -> Option<SortKey> {
        Some(match k {
            b'o' => SortKey::On,
            b'f' => SortKey::Off,
            b'r' => SortKey::Runnable,
            b's' => SortKey::Sleep,
            b'd' => SortKey::Disk,
            b't' => SortKey::Tid,
            b'n' => SortKey::Name,
            _ => return None,
        })
    }

    fn word(self) -> &'static str {
        match self {
            SortKey::On => "on",
            SortKey::Off => "off",
            SortKey::Runnable => "runnable",
            SortKey::Sleep => "sleep",
            SortKey::Disk => "disk",
            SortKey::Tid => "tid",
            SortKey::Name => "name",
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Row {
    pub pid: u32,
    pub tid: u32,
    pub threads: u32,
    pub name: String,
    pub alive_ns: u64,
    /// The time it ran: on-CPU time less steal.
    pub ran_ns: u64,
    /// The rest of its on-CPU time, what the hypervisor (or interrupts)
    /// took.
    pub steal_ns: u64,
    pub run_ns: u64,
    pub sleep_ns: u64,
    pub disk_ns: u64,
    pub other_ns: u64,
    /// The function blocked in longest, and for how long.
    pub blocked: Option<(String, u64)>,
}

impl Row {
    fn off(&self) -> u64 {
        self.run_ns + self.sleep_ns + self.disk_ns + self.other_ns
    }
}

pub struct Interval {
    pub n: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub rows: Vec<Row>,
}

/// The function a blocked stack names: the innermost frame of the
/// program's own code, where it has some (below it lie libc's wrappers
/// and the kernel), else the innermost user frame, else the kernel's.
fn blocked_in(frames: &[Frame]) -> String {
    let user = frames.iter().rev().filter(|f| !f.kernel && !f.func.starts_with('['));
    let system = |f: &&Frame| {
        f.module.as_deref().is_some_and(|m| m.starts_with("/lib") || m.starts_with("/usr/lib") || m.contains("/ld-linux") || m.contains("libc.so"))
    };
    let own = user.clone().find(|f| !system(f));
    own.or_else(|| user.clone().next()).or_else(|| frames.last()).map_or_else(|| "[no stack]".to_string(), |f| f.func.clone())
}

/// The rows of a window of offcputime's (`--every`).
pub fn interval(n: u32, records: &[Record], engine: &mut Engine, per_process: bool) -> Interval {
    let (mut start_ns, mut end_ns) = (0, 0);
    let mut rows: HashMap<u32, Row> = HashMap::new();
    for r in records {
        match r {
            Record::Header(h) => {
                start_ns = h.start_ns.unwrap_or(0);
                end_ns = h.end_ns.unwrap_or(0);
            }
            Record::Thread(t) => {
                let off = t.off_ns.unwrap_or_default();
                let ran = sampled_on_ns(t).unwrap_or(0);
                let alive = t.end_ns.unwrap_or(end_ns).saturating_sub(t.start_ns.unwrap_or(start_ns));
                let row = rows.entry(t.tid).or_default();
                *row = Row {
                    pid: t.pid,
                    tid: t.tid,
                    threads: 1,
                    name: t.comm.clone(),
                    alive_ns: alive,
                    ran_ns: ran,
                    steal_ns: t.on_ns.unwrap_or(0) - ran,
                    run_ns: off.r,
                    sleep_ns: off.s,
                    disk_ns: off.d,
                    other_ns: off.other,
                    blocked: None,
                };
            }
            _ => {}
        }
    }
    engine.prepare_records(records);
    let mut blocked: HashMap<(u32, String), u64> = HashMap::new();
    for r in records {
        if let Record::Stack(s) = r {
            if matches!(s.state, Some(State::S | State::D | State::Other)) && s.ns > 0 {
                let f = if s.frames.is_empty() { engine.frames(s) } else { s.frames.clone() };
                let key = if per_process { s.pid } else { s.tid };
                *blocked.entry((key, blocked_in(&f))).or_default() += s.ns;
            }
        }
    }
    let mut rows: Vec<Row> = rows.into_values().collect();
    if per_process {
        let mut by_pid: HashMap<u32, Row> = HashMap::new();
        for t in rows {
            let p = by_pid.entry(t.pid).or_insert_with(|| Row { pid: t.pid, tid: t.pid, ..Row::default() });
            if t.tid == t.pid || p.name.is_empty() {
                p.name = t.name.clone();
            }
            p.threads += 1;
            p.alive_ns += t.alive_ns;
            p.ran_ns += t.ran_ns;
            p.steal_ns += t.steal_ns;
            p.run_ns += t.run_ns;
            p.sleep_ns += t.sleep_ns;
            p.disk_ns += t.disk_ns;
            p.other_ns += t.other_ns;
        }
        rows = by_pid.into_values().collect();
    }
    for ((key, func), ns) in blocked {
        if let Some(row) = rows.iter_mut().find(|r| if per_process { r.pid == key } else { r.tid == key }) {
            if row.blocked.as_ref().is_none_or(|(_, b)| ns > *b) {
                row.blocked = Some((func, ns));
            }
        }
    }
    Interval { n, start_ns, end_ns, rows }
}

pub fn sort(rows: &mut [Row], key: SortKey) {
    match key {
        SortKey::Tid => rows.sort_by_key(|r| r.tid),
        SortKey::Name => rows.sort_by(|a, b| a.name.cmp(&b.name).then(a.tid.cmp(&b.tid))),
        _ => rows.sort_by_key(|r| {
            let v = match key {
                SortKey::On => r.ran_ns,
                SortKey::Off => r.off(),
                SortKey::Runnable => r.run_ns,
                SortKey::Sleep => r.sleep_ns,
                _ => r.disk_ns,
            };
            (std::cmp::Reverse(v), r.tid)
        }),
    }
}

fn pct(x: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        x as f64 * 100.0 / of as f64
    }
}

/// The table as text, `max_rows` rows at most.
pub fn render(iv: &Interval, title: &str, key: SortKey, per_process: bool, max_rows: usize) -> Vec<String> {
    let secs = iv.end_ns.saturating_sub(iv.start_ns) as f64 / 1e9;
    let mut out = vec![format!(
        "wallclock top: {title}, interval {} ({secs:.2} s, {:.3}-{:.3} s monotonic), {} {}, by {}",
        iv.n,
        iv.start_ns as f64 / 1e9,
        iv.end_ns as f64 / 1e9,
        iv.rows.len(),
        if per_process { "processes" } else { "threads" },
        key.word()
    )];
    let id = if per_process { "    PID THR" } else { "    TID" };
    out.push(format!("{id} {:<16} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6}  BLOCKED IN", "NAME", "ON%", "STEAL%", "RUNQ%", "SLEEP%", "DISK%", "OTHER%"));
    let mut rows = iv.rows.clone();
    sort(&mut rows, key);
    for r in rows.iter().take(max_rows) {
        let id = if per_process { format!("{:>7} {:>3}", r.pid, r.threads) } else { format!("{:>7}", r.tid) };
        let blocked = r.blocked.as_ref().map_or_else(|| "-".to_string(), |(f, ns)| format!("{f} ({:.0} ms)", *ns as f64 / 1e6));
        let a = r.alive_ns;
        out.push(format!(
            "{id} {:<16} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>6.1}  {blocked}",
            r.name,
            pct(r.ran_ns, a),
            pct(r.steal_ns, a),
            pct(r.run_ns, a),
            pct(r.sleep_ns, a),
            pct(r.disk_ns, a),
            pct(r.other_ns, a)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(func: &str, module: &str, kernel: bool) -> Frame {
        Frame { module: Some(module.into()), kernel, ..Frame::named(func) }
    }

    #[test]
    fn blocked_in_names_the_programs_own_innermost_frame() {
        let f = [
            frame("main", "/srv/app", false),
            frame("wait_lock", "/srv/app", false),
            frame("___pthread_mutex_lock", "/usr/lib/x86_64-linux-gnu/libc.so.6", false),
            frame("futex_wait", "[kernel]", true),
        ];
        assert_eq!(blocked_in(&f), "wait_lock");
        // Only libraries: the innermost user frame; only the kernel's: its leaf.
        assert_eq!(blocked_in(&f[2..]), "___pthread_mutex_lock");
        assert_eq!(blocked_in(&f[3..]), "futex_wait");
        assert_eq!(blocked_in(&[]), "[no stack]");
    }

    #[test]
    fn rows_sort_by_the_chosen_share() {
        let row = |tid, ran_ns, sleep_ns, disk_ns| Row { tid, name: format!("t{tid}"), alive_ns: 100, ran_ns, sleep_ns, disk_ns, ..Row::default() };
        let mut rows = vec![row(3, 10, 90, 0), row(1, 50, 0, 50), row(2, 90, 10, 0)];
        sort(&mut rows, SortKey::On);
        assert_eq!(rows.iter().map(|r| r.tid).collect::<Vec<_>>(), [2, 1, 3]);
        sort(&mut rows, SortKey::Sleep);
        assert_eq!(rows.iter().map(|r| r.tid).collect::<Vec<_>>(), [3, 2, 1]);
        sort(&mut rows, SortKey::Disk);
        assert_eq!(rows[0].tid, 1);
        sort(&mut rows, SortKey::Tid);
        assert_eq!(rows.iter().map(|r| r.tid).collect::<Vec<_>>(), [1, 2, 3]);
        let iv = Interval { n: 1, start_ns: 0, end_ns: 1_000_000_000, rows };
        let text = render(&iv, "pid 1 (x)", SortKey::Off, false, 2);
        assert_eq!(text.len(), 4, "{text:?}");
        assert!(text[0].ends_with(", 3 threads, by off"), "{}", text[0]);
    }

    #[test]
    fn steal_is_its_own_share_not_the_threads_run() {
        // 600 ms on-CPU of which the hypervisor took 150: ran 45%, steal 15%.
        let r = Row { tid: 7, name: "spin".into(), alive_ns: 1_000_000_000, ran_ns: 450_000_000, steal_ns: 150_000_000, run_ns: 400_000_000, ..Row::default() };
        let iv = Interval { n: 1, start_ns: 0, end_ns: 1_000_000_000, rows: vec![r] };
        let text = render(&iv, "pid 7 (spin)", SortKey::On, false, 10);
        assert!(text[1].contains("ON% STEAL%  RUNQ%"), "{}", text[1]);
        let w: Vec<&str> = text[2].split_whitespace().collect();
        assert_eq!(w[2..6], ["45.0", "15.0", "40.0", "0.0"], "{}", text[2]);
    }
}
