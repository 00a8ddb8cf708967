//! `--prepare WHEN` and `--activate WHEN`: set a capture up at one time
//! and start recording at another, so that captures on many hosts (or
//! several captures of one host) start at the same instant. The specs are
//! wprof's:
//!
//! - `@now`: at once;
//! - `@HH:MM[:SS[.FFF]]`: that time of today, local time;
//! - `@YYYY-MM-DDTHH:MM:SS[.FFF]`: that local date and time;
//! - `+DURATION` (`2s`, `500ms`, `1m30s`): that long after the launch;
//! - `/DURATION`: the next instant that is a whole multiple of DURATION
//!   since the Unix epoch (after the launch; for `--activate`, after the
//!   preparation), the same instant on every host with a synchronised
//!   clock.
//!
//! Times are resolved once, at the launch, on CLOCK_REALTIME, and waited
//! for on CLOCK_MONOTONIC (the capture's clock). A time in the past, or an
//! activation before the preparation, fails then, before anything is set up.

use anyhow::{bail, Result};

pub use crate::realtime::{local_time, realtime_ns, realtime_of};

/// The flags, shared by the capture tools.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct WhenArgs {
    /// Load and attach the capture at WHEN (the target's threads are read
    /// and a `-- COMMAND` is started, held, then): @now, @HH:MM[:SS],
    /// @YYYY-MM-DDTHH:MM:SS (local time), +DURATION after the launch
    /// (+2s, +1m30s) or /DURATION (the next whole multiple of DURATION
    /// since the Unix epoch: /5s, /1m). Default: at once.
    #[arg(long = "prepare", value_name = "WHEN")]
    pub prepare: Option<Spec>,
    /// Start recording at WHEN (same forms; /DURATION counts from the
    /// preparation), once prepared: nothing before it is recorded, -d
    /// counts from it, and a `-- COMMAND` is let run then. Captures
    /// given the same --activate /DURATION on several hosts start at the
    /// same instant. Default: as soon as prepared.
    #[arg(long = "activate", value_name = "WHEN")]
    pub activate: Option<Spec>,
    /// The launch that +DURATION and /DURATION count from, CLOCK_REALTIME
    /// ns (scripts/wallclock gives both of its captures its own).
    #[arg(long = "launched-at", value_name = "NS", hide = true)]
    pub launched_at: Option<u64>,
    /// Once prepared (loaded and attached), write FILE: the clocks then,
    /// `MONOTONIC_NS REALTIME_NS` (written beside it, then renamed).
    #[arg(long = "prepared-file", value_name = "FILE", hide = true)]
    pub prepared_file: Option<std::path::PathBuf>,
    /// Once prepared, wait for FILE to hold the CLOCK_MONOTONIC instant
    /// (ns, a line) to start recording at: a script that prepares several
    /// captures activates them all at one instant, the very nanosecond in
    /// each (scripts/wallclock does, after both --prepared-file appeared).
    #[arg(long = "activate-file", value_name = "FILE", hide = true, conflicts_with = "activate")]
    pub activate_file: Option<std::path::PathBuf>,
}

impl WhenArgs {
    /// Resolve the specs now, before anything is set up.
    pub fn schedule(&self) -> Result<Schedule> {
        let now = realtime_ns();
        let launched = crate::realtime::launched().unwrap_or(now);
        Schedule::resolve(self.prepare.as_ref(), self.activate.as_ref(), self.launched_at.unwrap_or(launched), now)
    }

    /// The specs, in the stream's header.
    pub fn to_header(&self, h: &mut wallclock_stream::Header) {
        h.prepare = self.prepare.as_ref().map(|s| s.text.clone());
        h.activate = self.activate.as_ref().map(|s| s.text.clone());
    }
}

/// One time spec, as typed (kept for the stream's header) and parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub text: String,
    when: When,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum When {
    Now,
    /// Today at this many ns after local midnight.
    Clock(u64),
    /// Realtime ns since the epoch.
    At(u64),
    After(u64),
    Aligned(u64),
}

/// A duration: a number with a unit (ns, us, ms, s, m, h), several in a
/// row (`1m30s`); a bare number is seconds.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let bad = || format!("{s:?} is not a duration (e.g. 2s, 500ms, 1m30s)");
    if s.is_empty() {
        return Err(bad());
    }
    if let Ok(secs) = s.parse::<f64>() {
        return secs_to_ns(secs).ok_or_else(bad);
    }
    let (mut total, mut rest) = (0u64, s);
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        let (num, tail) = rest.split_at(num_len);
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        let v: f64 = num.parse().map_err(|_| bad())?;
        total = total.checked_add(secs_to_ns(v * scale).ok_or_else(bad)?).ok_or_else(bad)?;
        rest = tail;
    }
    Ok(total)
}

fn secs_to_ns(secs: f64) -> Option<u64> {
    (0.0..1e9).contains(&secs).then(|| (secs * 1e9).round() as u64)
}

/// `HH:MM[:SS[.FFF]]` as ns after midnight.
fn clock_of_day(s: &str) -> Option<u64> {
    let mut parts = s.split(':');
    let h: u64 = parts.next()?.parse().ok()?;
    let m: u64 = parts.next()?.parse().ok()?;
    let sec: f64 = match parts.next() {
        Some(p) if !p.starts_with(['+', '-']) => p.parse().ok()?,
        Some(_) => return None,
        None => 0.0,
    };
    if parts.next().is_some() || h > 23 || m > 59 || !(0.0..60.0).contains(&sec) {
        return None;
    }
    Some((h * 3600 + m * 60) * 1_000_000_000 + secs_to_ns(sec)?)
}

impl std::str::FromStr for Spec {
    type Err = String;
    fn from_str(s: &str) -> Result<Spec, String> {
        let bad = |why: &str| format!("{s:?}: {why} (give @now, @HH:MM[:SS], @YYYY-MM-DDTHH:MM:SS, +DURATION or /DURATION)");
        let when = if s == "@now" {
            When::Now
        } else if let Some(t) = s.strip_prefix('@') {
            match t.split_once('T') {
                Some((date, time)) => {
                    let ymd: Vec<&str> = date.split('-').collect();
                    let [y, mo, d] = ymd[..] else { return Err(bad("not a date")) };
                    let (Ok(y), Ok(mo), Ok(d)) = (y.parse::<i32>(), mo.parse::<u32>(), d.parse::<u32>()) else {
                        return Err(bad("not a date"));
                    };
                    let tod = clock_of_day(time).filter(|_| time.split(':').count() == 3).ok_or_else(|| bad("not a time of day"))?;
                    When::At(local_to_realtime(y, mo, d, tod).ok_or_else(|| bad("no such local date"))?)
                }
                None => When::Clock(clock_of_day(t).ok_or_else(|| bad("not a time of day"))?),
            }
        } else if let Some(d) = s.strip_prefix('+') {
            When::After(parse_duration(d).map_err(|e| bad(&e))?)
        } else if let Some(d) = s.strip_prefix('/') {
            let ns = parse_duration(d).map_err(|e| bad(&e))?;
            if ns < 1_000_000 {
                return Err(bad("the alignment must be at least 1ms"));
            }
            When::Aligned(ns)
        } else {
            return Err(bad("unknown time"));
        };
        Ok(Spec { text: s.to_string(), when })
    }
}

/// Local date and ns after midnight to realtime ns (mktime: the local
/// time zone, daylight saving time as it is on that date).
fn local_to_realtime(y: i32, mo: u32, d: u32, tod: u64) -> Option<u64> {
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) {
        return None;
    }
    let secs = tod / 1_000_000_000;
    // SAFETY: tm is plain data; mktime reads it and the time zone.
    let t = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        tm.tm_year = y - 1900;
        tm.tm_mon = mo as i32 - 1;
        tm.tm_mday = d as i32;
        tm.tm_hour = (secs / 3600) as i32;
        tm.tm_min = (secs / 60 % 60) as i32;
        tm.tm_sec = (secs % 60) as i32;
        tm.tm_isdst = -1;
        let t = libc::mktime(&mut tm);
        // mktime normalises 31 February into March: refuse it.
        if tm.tm_mday != d as i32 || tm.tm_mon != mo as i32 - 1 {
            return None;
        }
        t
    };
    (t >= 0).then(|| t as u64 * 1_000_000_000 + tod % 1_000_000_000)
}

/// Local midnight of today, realtime ns.
fn local_midnight(now_real: u64) -> u64 {
    let secs = (now_real / 1_000_000_000) as libc::time_t;
    // SAFETY: plain data in and out of localtime_r.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&secs, &mut tm);
        tm
    };
    local_to_realtime(tm.tm_year + 1900, tm.tm_mon as u32 + 1, tm.tm_mday as u32, 0).unwrap_or(now_real)
}

impl Spec {
    /// The realtime ns this spec names, for a tool launched at `launch`
    /// whose previous phase is at `after`.
    fn resolve(&self, launch: u64, after: u64) -> u64 {
        match self.when {
            When::Now => after,
            When::Clock(tod) => local_midnight(launch) + tod,
            When::At(t) => t,
            When::After(d) => launch + d,
            When::Aligned(p) => (after / p + 1) * p,
        }
    }
}

/// When to set the capture up and when to start recording, resolved.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub prepare: Option<Spec>,
    pub activate: Option<Spec>,
    /// Realtime ns of each phase.
    pub prepare_at: u64,
    pub activate_at: u64,
}

impl Schedule {
    /// Resolve the specs at `launch` (realtime ns); `now` is the time of
    /// the check. A phase in the past or an activation before the
    /// preparation is an error.
    pub fn resolve(prepare: Option<&Spec>, activate: Option<&Spec>, launch: u64, now: u64) -> Result<Schedule> {
        let prepare_at = prepare.map_or(launch, |s| s.resolve(launch, launch));
        let activate_at = activate.map_or(prepare_at, |s| s.resolve(launch, prepare_at));
        for (flag, spec, at) in [("--prepare", prepare, prepare_at), ("--activate", activate, activate_at)] {
            if let Some(s) = spec.filter(|s| s.when != When::Now && at < now) {
                bail!("{flag} {}: {} is in the past (now {})", s.text, local_time(at), local_time(now));
            }
        }
        if let (Some(a), true) = (activate, activate_at < prepare_at) {
            let p = prepare.map_or("@now", |p| p.text.as_str());
            bail!("--activate {} ({}) is before --prepare {p} ({})", a.text, local_time(activate_at), local_time(prepare_at));
        }
        Ok(Schedule { prepare: prepare.cloned(), activate: activate.cloned(), prepare_at, activate_at })
    }

    /// Whether anything is to be waited for.
    pub fn given(&self) -> bool {
        self.prepare.is_some() || self.activate.is_some()
    }
}

#[cfg(test)]
#[path = "when_tests.rs"]
mod tests;
