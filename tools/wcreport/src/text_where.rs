//! "Where the time went": a thread's time by its own functions, as a
//! reader who did not write the tool reads it, and the modules whose time
//! has no name.
//!
//! ```text
//!   where the time went (own function → call → [state] kernel reason; 100% = alive 4.67 s):
//!     58.7%  2.74 s  compute_chunk
//!     55.0%  2.57 s    compute_chunk → [R] preempted
//!      3.7%   172 ms   compute_chunk [on-CPU]
//!     17.5%   818 ms  write_journal → fdatasync → [D] folio_wait_writeback
//! ```

use std::fmt::Write as _;

use wallclock_stream::{Kind, State};

use crate::functions::{FunctionTime, Part};
use crate::names::UnnamedModule;
use crate::model::ThreadReport;
use crate::text_fmt::{h, p};

/// What the legend says once per report.
pub const LEGEND: &str =
    "states: [on-CPU] running; [R] runnable, waiting for a CPU; [S] sleeping, waiting for an event; [D] uninterruptible, mostly I/O";

fn tag(part: &Part) -> String {
    match (part.kind, part.state) {
        (Kind::On, _) => "[on-CPU]".to_string(),
        (Kind::Off, Some(State::Other)) => "[other]".to_string(),
        (Kind::Off, Some(st)) => format!("[{st:?}]"),
        (Kind::Off, None) => "[off-CPU]".to_string(),
        _ => "[unclassified]".to_string(),
    }
}

/// `func → call → [state] reason`, or `func → call [state]` without a reason.
pub fn chain(func: &str, part: &Part) -> String {
    let mut segs = vec![func.to_string()];
    segs.extend(part.call.clone());
    match &part.reason {
        Some(r) => {
            segs.push(format!("{} {r}", tag(part)));
            segs.join(" → ")
        }
        None => format!("{} {}", segs.join(" → "), tag(part)),
    }
}

fn rows_of(f: &FunctionTime, max_parts: usize, share: &dyn Fn(u64) -> Option<f64>) -> Vec<[String; 3]> {
    if f.parts.len() == 1 {
        return vec![[p(f.pct), h(f.ns), chain(&f.func, &f.parts[0])]];
    }
    let mut rows = vec![[p(f.pct), h(f.ns), f.func.clone()]];
    for part in f.parts.iter().take(max_parts) {
        rows.push([p(part.pct), h(part.ns), format!("  {}", chain(&f.func, part))]);
    }
    let rest = &f.parts[max_parts.min(f.parts.len())..];
    if !rest.is_empty() {
        let ns: u64 = rest.iter().map(|x| x.ns).sum();
        rows.push([p(share(ns)), h(ns), format!("  ({} more way(s) of {})", rest.len(), f.func)]);
    }
    rows
}

/// The section of one thread; empty when it has no stack.
pub fn where_time_went(t: &ThreadReport, max_parts: usize) -> String {
    if t.functions.is_empty() {
        return String::new();
    }
    let base = match t.alive_ns {
        Some(a) => format!("alive {}", h(a)),
        None => format!("on + off {}", h(t.on_ns + t.off_total_ns)),
    };
    let mut s = format!("  where the time went (own function → call → [state] kernel reason; 100% = {base}):\n");
    // The same 100% as the functions' own shares.
    let whole = t.alive_ns.unwrap_or(t.on_ns + t.off_total_ns);
    let share = |ns: u64| (whole > 0).then(|| ns as f64 * 100.0 / whole as f64);
    let mut rows: Vec<[String; 3]> = t.functions.iter().flat_map(|f| rows_of(f, max_parts.max(1), &share)).collect();
    if t.functions_rest > 0 {
        rows.push([
            p(share(t.functions_rest_ns)),
            h(t.functions_rest_ns),
            format!("({} more function(s))", t.functions_rest),
        ]);
    }
    let w0 = rows.iter().map(|r| r[0].chars().count()).max().unwrap_or(0);
    let w1 = rows.iter().map(|r| r[1].chars().count()).max().unwrap_or(0);
    for r in rows {
        let _ = writeln!(s, "    {:>w0$}  {:>w1$}  {}", r[0], r[1], r[2]);
    }
    s
}

/// One line per module whose time has no name, with what to do about it.
/// Modules with under 0.1% of `total_ns` unnamed are left to --json.
pub fn unnamed_section(v: &[UnnamedModule], total_ns: u64) -> String {
    let shown: Vec<&UnnamedModule> =
        v.iter().filter(|m| m.unnamed_ns.max(m.inside_ns) as u128 * 1000 >= total_ns as u128).collect();
    if shown.is_empty() {
        return String::new();
    }
    let mut s = "time without a name (a frame of the module has no symbol):\n".to_string();
    for m in shown {
        if m.unnamed_ns > 0 {
            let _ = writeln!(
                s,
                "  {}: {:.0}% of its time unnamed ({} of {}; {}): {}",
                m.module,
                m.pct,
                h(m.unnamed_ns),
                h(m.ns),
                m.why,
                m.hint
            );
        } else {
            // Its unnamed frames are callers, never the innermost one.
            let _ = writeln!(s, "  {}: unnamed frames inside {} of stacks ({}): {}", m.module, h(m.inside_ns), m.why, m.hint);
        }
        for step in &m.steps {
            let _ = writeln!(s, "      {step}");
        }
    }
    s
}
