//! What the runtime readers (hotspot, v8, php, python, beam) cost the capture, and the
//! switch that turns them off.
//!
//! Each reader adds the CPU time it spends on a stack and counts the stacks
//! it read; the tools write both into their stats trailer
//! (`hotspot_ns`, `hotspot_stacks`, `v8_ns`, ...), so that `ns / stacks`
//! is the reader's cost per stack (scripts/bench-runtimes). Only stacks of
//! a process the reader recognised count: a Node stack never pays the
//! JVM reader's clock reads. What a reader does once per process (finding
//! the runtime, reading its layout tables or metadata) is not in it.
//!
//! `WALLCLOCK_NO_RUNTIMES` turns readers off: `1` or `all` every one, or a
//! comma list of `hotspot`, `v8`, `php`, `python`, `beam`. A process then gets what it got
//! before its reader existed (a JVM's stacks cut in JIT code, Node's JIT
//! frames unnamed, PHP's and CPython's frames absent, BEAM's JIT code unnamed): for a reader that misbehaves on
//! some runtime version, and to measure what the readers cost.

use std::sync::OnceLock;

/// The readers the switch and the trailer know, in the trailer's order.
pub const READERS: [&str; 5] = ["hotspot", "v8", "php", "python", "beam"];

/// CPU time spent and stacks read by one reader.
#[derive(Debug, Default, Clone, Copy)]
pub struct Cost {
    pub ns: u64,
    pub stacks: u64,
}

/// This thread's CPU time: on a loaded machine a wall clock would also
/// count the time the capture waited for a CPU (tenfold at load 50).
pub fn now() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Cost {
    /// One stack read since `t0` (from [`now`]).
    pub fn stack(&mut self, t0: u64) {
        self.ns += now().saturating_sub(t0);
        self.stacks += 1;
    }
}

/// Whether `reader` is turned off by `WALLCLOCK_NO_RUNTIMES`.
pub fn off(reader: &str) -> bool {
    static OFF: OnceLock<Vec<String>> = OnceLock::new();
    OFF.get_or_init(|| parse(std::env::var("WALLCLOCK_NO_RUNTIMES").ok().as_deref())).iter().any(|r| r == reader)
}

fn parse(v: Option<&str>) -> Vec<String> {
    let Some(v) = v.map(str::trim).filter(|v| !v.is_empty() && *v != "0") else { return Vec::new() };
    let mut out = Vec::new();
    for w in v.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        match w {
            "1" | "all" => out.extend(READERS.iter().map(|r| r.to_string())),
            r if READERS.contains(&r) => out.push(r.to_string()),
            r => {
                let tool = std::env::args().next().unwrap_or_default();
                let tool = tool.rsplit('/').next().unwrap_or("capture").to_string();
                eprintln!("{tool}: warning: WALLCLOCK_NO_RUNTIMES: unknown reader `{r}` ignored (known: all, {})", READERS.join(", "));
            }
        }
    }
    out
}

/// The trailer's counters: `<reader>_ns` and `<reader>_stacks` of each
/// reader that read a stack, in the order given.
pub fn stats(costs: &[(&str, Cost)]) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for &(r, c) in costs {
        if c.stacks > 0 {
            out.push((format!("{r}_ns"), c.ns));
            out.push((format!("{r}_stacks"), c.stacks));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_values() {
        assert!(parse(None).is_empty());
        assert!(parse(Some("0")).is_empty());
        assert_eq!(parse(Some("1")), READERS);
        assert_eq!(parse(Some("all")), READERS);
        assert_eq!(parse(Some("v8, php")), ["v8", "php"]);
        assert_eq!(parse(Some("jvm,hotspot")), ["hotspot"]);
    }

    #[test]
    fn only_readers_that_read() {
        let s = stats(&[("hotspot", Cost { ns: 5, stacks: 2 }), ("v8", Cost::default()), ("php", Cost { ns: 0, stacks: 1 }), ("python", Cost::default())]);
        let keys: Vec<&str> = s.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["hotspot_ns", "hotspot_stacks", "php_ns", "php_stacks"]);
    }
}
