//! The text of `--spans`: per span name, its count and latency
//! percentiles, then where the slow spans' time went, by state and by own
//! function (as a thread's section says it).

use std::fmt::Write;

use wallclock_stream::units::human_ns;

use crate::spans::SpanReport;

fn share(ns: u64, of: u64) -> String {
    if of == 0 {
        return "0.0%".into();
    }
    format!("{:.1}%", ns as f64 * 100.0 / of as f64)
}

/// Latencies to the microsecond, whatever their size (human_ns keeps
/// three digits: 123 ms would hide half a millisecond).
fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// The SPANS section.
pub fn section(reports: &[SpanReport], max_parts: usize) -> String {
    let mut s = String::new();
    for r in reports {
        let _ = writeln!(s, "SPANS {}: {} spans", r.name, r.count);
        let _ = writeln!(
            s,
            "  latency p50 {}  p90 {}  p99 {}  max {}",
            ms(r.p50_ns),
            ms(r.p90_ns),
            ms(r.p99_ns),
            ms(r.max_ns)
        );
        let which = match r.threshold_ns {
            Some(t) => format!("slower than {}", human_ns(t)),
            None => "all".into(),
        };
        let w = r.slow_wall_ns;
        let o = &r.slow_off_ns;
        let _ = writeln!(s, "  {which}: {} spans, {} in all", r.slow, human_ns(w));
        let _ = writeln!(
            s,
            "    on-CPU {} ({}), runnable {} ({}), sleeping {} ({}), uninterruptible {} ({}), other {} ({})",
            human_ns(r.slow_on_ns),
            share(r.slow_on_ns, w),
            human_ns(o.r),
            share(o.r, w),
            human_ns(o.s),
            share(o.s, w),
            human_ns(o.d),
            share(o.d, w),
            human_ns(o.other),
            share(o.other, w)
        );
        if r.slow == 0 {
            continue;
        }
        let _ = writeln!(s, "    where their time went (own functions):");
        for f in r.functions.iter().take(max_parts.max(1) * 2) {
            let _ = writeln!(s, "      {:>6}  {:>10}  {}", share(f.ns, w), human_ns(f.ns), f.func);
            for p in f.parts.iter().take(max_parts.max(1)) {
                let what = match p.state {
                    Some(st) => st.label().to_string(),
                    None => "on-CPU".to_string(),
                };
                let mut how = what;
                if let Some(c) = &p.call {
                    how.push_str(&format!(" in {c}"));
                }
                if let Some(r) = &p.reason {
                    how.push_str(&format!(" ({r})"));
                }
                let _ = writeln!(s, "              {:>6}  {:>10}  {how}", share(p.ns, w), human_ns(p.ns));
            }
        }
    }
    s
}
