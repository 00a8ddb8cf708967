//! The text report's units and columns, shared by its sections.

use std::fmt::Write as _;

use wallclock_stream::units::human_ns;

use crate::report::Report;

thread_local! {
    /// The event an event profile counts (see [`Report::event`]): its
    /// values are printed as counts of it, not as durations.
    static EVENT: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Print `r`'s values in its unit from now on.
pub(crate) fn unit_of(r: &Report) {
    EVENT.with(|e| *e.borrow_mut() = r.event.clone());
}

pub(crate) fn h(ns: u64) -> String {
    EVENT.with(|e| match &*e.borrow() {
        Some(ev) => format!("{ns} {ev}"),
        None => human_ns(ns),
    })
}

/// A name for display: `-` when unknown (plain folded input).
pub(crate) fn name(comm: &str) -> &str {
    if comm.is_empty() {
        "-"
    } else {
        comm
    }
}

pub(crate) fn hopt(ns: Option<u64>) -> String {
    ns.map_or("-".to_string(), h)
}

/// A duration whatever the profile's unit (a window, a thread's life).
pub(crate) fn time(ns: Option<u64>) -> String {
    ns.map_or("-".to_string(), human_ns)
}

pub(crate) fn p(pct: Option<f64>) -> String {
    pct.map_or("-".to_string(), |v| format!("{v:.1}%"))
}

/// Columns: the first `left` left-aligned, the rest right-aligned.
pub(crate) fn table(rows: &[Vec<String>], left: usize, indent: &str) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> =
        (0..n).map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let mut line = indent.to_string();
        for (c, cell) in r.iter().enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            if c < left {
                let _ = write!(line, "{cell:<w$}", w = widths[c]);
            } else {
                let _ = write!(line, "{cell:>w$}", w = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
