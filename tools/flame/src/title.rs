//! What a graph shows, in words: the default title (target, pids, window,
//! date, from the stream headers) and the root frame (the process, or what
//! the graph covers when it holds several, each then its own root).

use std::collections::BTreeMap;

use wallclock_stream::units::human_ns;
use wallclock_stream::{folded, Header};

use crate::input::Profile;

/// The title of a graph with nothing to say about its input.
pub const GENERIC: &str = "Flame Graph";

/// Fold one more stream header into what the graph covers.
pub fn merge_header(into: &mut Option<Header>, h: Header) {
    let Some(a) = into else {
        *into = Some(h);
        return;
    };
    for p in h.pids {
        if !a.pids.contains(&p) {
            a.pids.push(p);
        }
    }
    a.command = a.command.take().or(h.command);
    a.start_ns = [a.start_ns, h.start_ns].into_iter().flatten().min();
    a.end_ns = [a.end_ns, h.end_ns].into_iter().flatten().max();
    if !a.tool.split('+').any(|t| t == h.tool) {
        a.tool = format!("{}+{}", a.tool, h.tool);
    }
}

/// `NAME (PID)` of each process of the profile.
pub fn process_roots(p: &Profile) -> BTreeMap<u32, String> {
    p.processes.iter().map(|(&pid, name)| (pid, folded::process_root(name, pid))).collect()
}

/// The root box's label: the process when there is one, else what the
/// graph covers (the processes then each have their own root below it).
/// `None` (inferno's `all`) for input without processes (folded lines).
pub fn root_label(p: &Profile) -> Option<String> {
    let roots = process_roots(p);
    match roots.len() {
        0 => None,
        1 => roots.into_values().next(),
        n => {
            let mut names: Vec<&str> = roots.values().map(String::as_str).take(4).collect();
            if n > 4 {
                names.push("...");
            }
            Some(format!("all {n} processes: {}", names.join(", ")))
        }
    }
}

/// `TARGET (pid N): WHAT IT SHOWS, WINDOW from START`, from the stream headers;
/// [`GENERIC`] for input without a header.
pub fn default_title(p: &Profile) -> String {
    let Some(h) = &p.header else { return GENERIC.to_string() };
    let mut pids: Vec<u32> = if h.pids.is_empty() { p.processes.keys().copied().collect() } else { h.pids.clone() };
    pids.sort_unstable();
    let target = match &h.command {
        Some(c) if !c.is_empty() => shorten(&c.join(" "), 60),
        _ => {
            let names: Vec<&str> = pids.iter().filter_map(|pid| p.processes.get(pid).map(String::as_str)).collect();
            if names.is_empty() {
                "all processes".to_string()
            } else {
                shorten(&names.join(", "), 60)
            }
        }
    };
    let mut t = target;
    match pids.len() {
        0 => {}
        1 => t.push_str(&format!(" (pid {})", pids[0])),
        _ => t.push_str(&format!(" (pids {})", shorten(&pids.iter().map(u32::to_string).collect::<Vec<_>>().join(","), 40))),
    }
    t.push_str(&format!(": {}", shows(&h.tool)));
    if let Some(w) = h.window_ns() {
        t.push_str(&format!(", {} window", human_ns(w)));
    }
    if let Some(date) = h.start_ns.and_then(wall_date) {
        t.push_str(&format!(" from {date}"));
    }
    t
}

/// What the stream of `tool` (`a+b` when several were drawn together)
/// measures, in a reader's words.
fn shows(tool: &str) -> String {
    let what: Vec<&str> = tool
        .split('+')
        .map(|t| match t {
            "stackmerge" => "wall-clock time",
            "offcputime" => "off-CPU time",
            "oncputime" => "on-CPU time",
            "gputrace" => "GPU time",
            other => other,
        })
        .collect();
    what.join(" + ")
}

fn shorten(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// The UTC date of a CLOCK_MONOTONIC time, when it lies in this machine's
/// current boot (the stream's clock has no date of its own).
pub fn wall_date(mono_ns: u64) -> Option<String> {
    let now = |clock| {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: a valid clock id and a timespec to write into.
        (unsafe { libc::clock_gettime(clock, &mut ts) } == 0).then(|| ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128)
    };
    let (mono, real) = (now(libc::CLOCK_MONOTONIC)?, now(libc::CLOCK_REALTIME)?);
    if mono_ns as i128 > mono {
        return None;
    }
    let secs = ((real - (mono - mono_ns as i128)) / 1_000_000_000) as i64;
    Some(utc(secs))
}

/// `YYYY-MM-DD HH:MM:SS UTC` of Unix seconds (Howard Hinnant's civil_from_days).
fn utc(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem / 60 % 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400 + 3_661), "2000-02-29 01:01:01 UTC");
        assert_eq!(utc(1_735_689_599), "2024-12-31 23:59:59 UTC");
    }

    #[test]
    fn future_monotonic_time_has_no_date() {
        assert_eq!(wall_date(u64::MAX), None);
        assert!(wall_date(1).is_some());
    }
}
