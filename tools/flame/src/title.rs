//! What a graph shows, in words: the default title (target, pids, window,
//! date, from the stream headers) and the root frame (the process, or what
//! the graph covers when it holds several, each then its own root).

use std::collections::BTreeMap;

use wallclock_stream::units::human_ns;
use wallclock_stream::folded;

use crate::input::Profile;

/// The title of a graph with nothing to say about its input.
pub const GENERIC: &str = "Flame Graph";

/// The root of each process of the profile: `NAME (PID)`, or `NAME` when
/// grouped by command.
pub fn process_roots(p: &Profile, by_command: bool) -> BTreeMap<u32, String> {
    p.processes.iter().map(|(&key, name)| (key, process_root(by_command, name, key))).collect()
}

/// The root of the process of this key (`process_key`): a later process
/// of a reused pid is `NAME (PID) (2nd)`.
pub fn process_root(by_command: bool, name: &str, key: u32) -> String {
    let (pid, pgen) = wallclock_stream::pgen::split_process_key(key);
    let root = folded::Roots::root(by_command, name, pid);
    if by_command {
        root
    } else {
        root + &wallclock_stream::pgen::pgen_suffix(pgen)
    }
}

/// The distinct command names of the profile's processes and how many
/// processes each has, in the order of their first pid (a tree's root,
/// `make`, first).
fn commands(p: &Profile) -> Vec<(String, usize)> {
    let mut v: Vec<(String, usize)> = Vec::new();
    for name in p.processes.values() {
        let name = if name.is_empty() { "?" } else { name };
        match v.iter_mut().find(|(c, _)| c == name) {
            Some((_, n)) => *n += 1,
            None => v.push((name.to_string(), 1)),
        }
    }
    v
}

/// The root box's label: the process when there is one, else what the
/// graph covers (the processes then each have their own root below it,
/// or one per command name when `by_command`).
/// `None` (inferno's `all`) for input without processes (folded lines).
pub fn root_label(p: &Profile, by_command: bool) -> Option<String> {
    let roots = process_roots(p, false);
    match roots.len() {
        0 => None,
        1 => roots.into_values().next(),
        n if by_command => {
            let cmds = commands(p);
            let mut names: Vec<String> = cmds.iter().take(6).map(|(c, k)| format!("{c} x{k}")).collect();
            if cmds.len() > 6 {
                names.push("...".into());
            }
            Some(format!("all {n} processes, {} commands: {}", cmds.len(), names.join(", ")))
        }
        n => {
            let mut names: Vec<&str> = roots.values().map(String::as_str).take(4).collect();
            if n > 4 {
                names.push("...");
            }
            Some(format!("all {n} processes: {}", names.join(", ")))
        }
    }
}

/// The longest default title in characters: at the default 1200 pixels,
/// inferno's title font holds about 110 (a build's 129 pids ran off both
/// edges). The processes and pids in full are in `wcreport`.
pub const TITLE_MAX: usize = 100;

/// `TARGET (pid N): WHAT IT SHOWS, WINDOW from START`, from the stream headers;
/// [`GENERIC`] for input without a header. Several processes: their number
/// and their command names, as many as fit in [`TITLE_MAX`].
pub fn default_title(p: &Profile) -> String {
    let Some(h) = &p.header else { return GENERIC.to_string() };
    let mut pids: Vec<u32> = if h.pids.is_empty() { p.processes.keys().map(|&k| wallclock_stream::pgen::split_process_key(k).0).collect() } else { h.pids.clone() };
    pids.sort_unstable();
    pids.dedup();
    // An event profile (oncputime -e) counts its event, not time.
    let mut tail = match &h.event {
        Some(e) => format!(": {e} (on-CPU stacks where they happened)"),
        None => format!(": {}", shows(&h.tool)),
    };
    if let Some(w) = h.window_ns() {
        tail.push_str(&format!(", {} window", human_ns(w)));
    }
    let date = h.start_ns.and_then(wall_date).map(|d| format!(" from {d}")).unwrap_or_default();
    let who = match pids.len() {
        0 => String::new(),
        1 => format!(" (pid {})", pids[0]),
        2..=3 => format!(" (pids {})", pids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")),
        n => format!(" ({n} processes)"),
    };
    let command = h.command.as_ref().filter(|c| !c.is_empty()).map(|c| c.join(" "));
    let fixed = who.chars().count() + tail.chars().count() + date.chars().count();
    // Room for the target; the date goes first when there is too little.
    let (room, date) = if fixed + 20 <= TITLE_MAX { (TITLE_MAX - fixed, date) } else { (TITLE_MAX.saturating_sub(fixed - date.chars().count()).max(20), String::new()) };
    let target = match command {
        Some(c) => shorten(&c, room.saturating_sub(3)),
        None if p.processes.is_empty() => "all processes".to_string(),
        None => {
            // The command names, most frequent first, as many as fit.
            let mut t = String::new();
            for (i, (c, _)) in commands(p).iter().enumerate() {
                let add = if i == 0 { c.clone() } else { format!(", {c}") };
                if t.chars().count() + add.chars().count() + 5 > room {
                    t.push_str(", ...");
                    break;
                }
                t.push_str(&add);
            }
            t
        }
    };
    format!("{target}{who}{tail}{date}")
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
