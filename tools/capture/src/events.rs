//! `oncputime -e EVENT[@PERIOD]`: the perf events stacks can be sampled
//! on besides the cpu clock, as perf names them. A software event counts
//! in the kernel on every machine; a hardware one needs the CPU's PMU,
//! which a virtual machine often lacks: that is one line naming it, not a
//! capture that silently samples nothing.
//!
//! A sample is taken every PERIOD events (perf's `-c`), so each stands for
//! PERIOD of them and a stack's weight is its samples times PERIOD: the
//! profile's unit is the event, not time. The cpu clock keeps `-F HZ`.

use anyhow::{anyhow, bail, Result};

const SOFTWARE: u32 = 1;
const HARDWARE: u32 = 0;
const RAW: u32 = 4;

/// (names, type, config, default period). The periods keep a busy target
/// to a few thousand samples a second: each sample copies a user stack
/// into the ring buffer.
const TABLE: &[(&[&str], u32, u64, u64)] = &[
    (&["cpu-clock"], SOFTWARE, 0, 0),
    (&["page-faults", "faults"], SOFTWARE, 2, 100),
    (&["context-switches", "cs"], SOFTWARE, 3, 10),
    (&["cpu-migrations", "migrations"], SOFTWARE, 4, 1),
    (&["minor-faults"], SOFTWARE, 5, 100),
    (&["major-faults"], SOFTWARE, 6, 1),
    (&["cycles", "cpu-cycles"], HARDWARE, 0, 1_000_003),
    (&["instructions"], HARDWARE, 1, 1_000_003),
    (&["cache-misses"], HARDWARE, 3, 10_007),
];

/// One sampling event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The name as perf writes it (`page-faults`, `r01c2`).
    pub name: String,
    type_: u32,
    config: u64,
    /// Events per sample; 0: the cpu clock at `-F` Hz.
    pub period: u64,
}

impl Default for Event {
    fn default() -> Event {
        "cpu-clock".parse().expect("cpu-clock is in the table")
    }
}

impl std::str::FromStr for Event {
    type Err = String;
    fn from_str(spec: &str) -> Result<Event, String> {
        let (name, period) = match spec.split_once('@') {
            Some((n, p)) => {
                let p: u64 = p.parse().ok().filter(|p| *p > 0).ok_or_else(|| format!("{spec:?}: the period after @ must be a whole number of events, at least 1"))?;
                (n, Some(p))
            }
            None => (spec, None),
        };
        let (name, type_, config, default) = if let Some(hex) = name.strip_prefix('r').filter(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit())) {
            let config = u64::from_str_radix(hex, 16).map_err(|_| format!("{spec:?}: raw event r{hex} does not fit 64 bits"))?;
            (name.to_string(), RAW, config, 1_000_003)
        } else {
            let (names, t, c, d) = TABLE.iter().find(|(names, ..)| names.contains(&name)).ok_or_else(|| {
                let known: Vec<&str> = TABLE.iter().map(|(n, ..)| n[0]).collect();
                format!("unknown event {name:?}: give one of {} or rNNNN (a raw hardware event, hex)", known.join(", "))
            })?;
            (names[0].to_string(), *t, *c, *d)
        };
        if default == 0 && period.is_some() {
            return Err(format!("{spec:?}: the cpu clock samples at -F HZ, not every N events"));
        }
        Ok(Event { name, type_, config, period: period.unwrap_or(default) })
    }
}

impl Event {
    /// The cpu clock (sampled at -F Hz, weighed as time).
    pub fn is_clock(&self) -> bool {
        self.period == 0
    }

    /// A counting event: `name` for the header, None for the clock.
    pub fn counted(&self) -> Option<&str> {
        (!self.is_clock()).then_some(self.name.as_str())
    }

    /// Open it once and close it: a hardware event on a machine without
    /// a PMU fails here, in one line, before anything is set up.
    pub fn check(&self) -> Result<()> {
        let fd = self.open(0, 1)?;
        // SAFETY: fd was just opened here and is not used again.
        unsafe { libc::close(fd) };
        Ok(())
    }

    /// A perf event on one CPU, every task, sampling as asked (the clock
    /// at `freq` Hz).
    pub fn open(&self, cpu: u32, freq: u64) -> Result<i32> {
        let attr = PerfAttr {
            type_: self.type_,
            config: self.config,
            sample_period: if self.is_clock() { freq } else { self.period },
            flags: if self.is_clock() { 1 << 10 } else { 0 }, // freq
            ..Default::default()
        };
        let e = match perf_event_open(&attr, cpu) {
            Ok(fd) => return Ok(fd),
            Err(e) => e,
        };
        let no_pmu = matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV));
        if self.type_ != SOFTWARE && no_pmu {
            bail!(
                "-e {}: this machine has no hardware PMU (no CPU performance-monitoring unit under /sys/bus/event_source/devices, {}: a virtual machine without one): hardware events cannot be counted here; software events can: {}",
                self.name,
                pmus(),
                software_names()
            );
        }
        Err(anyhow!("perf_event_open({}, cpu {cpu}): {e}", self.name))
    }
}

/// `struct perf_event_attr` up to `clockid` (PERF_ATTR_SIZE_VER7 with the
/// padding), for every event this crate opens: the sampling events here
/// and the mmap log's dummy event (`crate::mmaplog`).
#[repr(C)]
#[derive(Default)]
pub(crate) struct PerfAttr {
    pub type_: u32,
    pub size: u32,
    pub config: u64,
    /// Or the frequency, with the freq flag.
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub wakeup_events: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub rest: [u64; 4],
}

/// perf_event_open(2) of `attr` on one CPU, every task, close-on-exec
/// (`attr.size` is filled in here).
pub(crate) fn perf_event_open(attr: &PerfAttr, cpu: u32) -> std::io::Result<i32> {
    open_on(attr, -1, cpu as i32)
}

/// The CPU clock of one thread, wherever it runs, firing after each
/// `period_ns` of its CPU time (wcdump's tick on a running thread).
pub fn open_thread_clock(tid: u32, period_ns: u64) -> std::io::Result<i32> {
    let attr = PerfAttr { type_: SOFTWARE, config: 0 /* PERF_COUNT_SW_CPU_CLOCK */, sample_period: period_ns, ..Default::default() };
    open_on(&attr, tid as i32, -1)
}

fn open_on(attr: &PerfAttr, pid: i32, cpu: i32) -> std::io::Result<i32> {
    let attr = PerfAttr { size: std::mem::size_of::<PerfAttr>() as u32, ..*attr };
    // SAFETY: attr is a valid perf_event_attr of the size given.
    let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, &attr as *const PerfAttr, pid, cpu, -1i32, 8u64 /* PERF_FLAG_FD_CLOEXEC */) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd as i32)
}

/// The event sources the kernel lists, for the message.
fn pmus() -> String {
    let mut v: Vec<String> = std::fs::read_dir("/sys/bus/event_source/devices")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    format!("only {}", v.join(", "))
}

fn software_names() -> String {
    TABLE.iter().filter(|(_, t, ..)| *t == SOFTWARE).map(|(n, ..)| n[0]).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        let e: Event = "page-faults".parse().unwrap();
        assert_eq!((e.name.as_str(), e.type_, e.config, e.period), ("page-faults", SOFTWARE, 2, 100));
        let e: Event = "faults@7".parse().unwrap();
        assert_eq!((e.name.as_str(), e.period), ("page-faults", 7));
        let e: Event = "r01c2@1000".parse().unwrap();
        assert_eq!((e.type_, e.config, e.period), (RAW, 0x1c2, 1000));
        assert!(Event::default().is_clock());
        assert_eq!(Event::default().counted(), None);
        for (bad, says) in [("nope", "unknown event"), ("page-faults@0", "at least 1"), ("cycles@x", "whole number"), ("cpu-clock@5", "-F"), ("rxyz", "unknown event")] {
            let e = bad.parse::<Event>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
