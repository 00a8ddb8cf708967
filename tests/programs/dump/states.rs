//! The states program (states.c) for tests/dump.rs and tests/top.rs:
//! started, its threads' ids and the sleeper's start read, and its CPU
//! clock reports kept as they come (a reader thread drains its stdout).

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

/// Each thread's function, as the dump must name it.
pub const FUNCS: [(&str, &str); 6] = [
    ("sleeper", "sleep_forever"),
    ("spin1", "spin_a"),
    ("spin2", "spin_b"),
    ("syncer", "sync_loop"),
    ("holder", "hold_lock"),
    ("waiter", "wait_lock"),
];

/// (CLOCK_MONOTONIC ns before and after the clocks were read, CPU ns of
/// each named thread).
type Report = (u64, u64, HashMap<String, u64>);

pub struct States {
    child: Child,
    pub pid: u32,
    pub tids: HashMap<String, u32>,
    pub sleeper_since: u64,
    reports: Arc<Mutex<Vec<Report>>>,
}

impl Drop for States {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl States {
    /// `bin DIR EXTRA`, once it printed `ready`.
    pub fn start(bin: &Path, dir: &Path, extra: usize) -> States {
        let mut child = Command::new(bin).arg(dir).arg(extra.to_string()).stdout(Stdio::piped()).spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let pid = child.id();
        let mut s = States { child, pid, tids: HashMap::new(), sleeper_since: 0, reports: Arc::default() };
        for l in lines.by_ref() {
            let l = l.unwrap();
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                ["thread", name, tid] => {
                    s.tids.insert(name.to_string(), tid.parse().unwrap());
                }
                ["sleeper", "since", ns] => s.sleeper_since = ns.parse().unwrap(),
                ["ready"] => break,
                _ => panic!("states printed {l:?}"),
            }
        }
        assert_eq!(s.tids.len(), 6, "states did not start its threads");
        assert!(s.sleeper_since > 0, "states did not say when its sleeper slept");
        let reports = s.reports.clone();
        std::thread::spawn(move || {
            for l in lines.map_while(Result::ok) {
                let w: Vec<&str> = l.split_whitespace().collect();
                if w.first() != Some(&"cpu") || w.len() < 3 {
                    continue;
                }
                let (t0, t1) = (w[1].parse().unwrap(), w[2].parse().unwrap());
                let cpu = w[3..].chunks(2).map(|p| (p[0].to_string(), p[1].parse().unwrap())).collect();
                reports.lock().unwrap().push((t0, t1, cpu));
            }
        });
        s
    }

    /// Each named thread's CPU ns at the monotonic time `at`,
    /// interpolated between the two reports around it.
    pub fn cpu_at(&self, at: u64) -> HashMap<String, f64> {
        let r = self.reports.lock().unwrap();
        let i = r.partition_point(|(t, _, _)| *t <= at);
        assert!(i > 0 && i < r.len(), "no CPU clock report around {at}");
        let ((t0, _, a), (t1, _, b)) = (&r[i - 1], &r[i]);
        let f = (at - t0) as f64 / (t1 - t0) as f64;
        a.iter().map(|(k, &v0)| (k.clone(), v0 as f64 + (b[k] as f64 - v0 as f64) * f)).collect()
    }

    /// Bounds of each named thread's CPU ns at the monotonic time `at`:
    /// its clocks in the last report read wholly before it and the first
    /// read wholly after it.
    pub fn cpu_bounds(&self, at: u64) -> HashMap<String, (u64, u64)> {
        let r = self.reports.lock().unwrap();
        let before = r.iter().rev().find(|(_, t1, _)| *t1 <= at);
        let after = r.iter().find(|(t0, _, _)| *t0 >= at);
        let (Some((_, _, a)), Some((_, _, b))) = (before, after) else { panic!("no CPU clock report around {at}") };
        a.iter().map(|(k, &lo)| (k.clone(), (lo, b[k]))).collect()
    }

    /// The time of the latest report.
    pub fn last_report(&self) -> u64 {
        self.reports.lock().unwrap().last().map_or(0, |r| r.0)
    }
}
