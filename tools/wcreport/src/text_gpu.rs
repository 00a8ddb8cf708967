//! The GPU section of the text report.

use std::fmt::Write as _;

use crate::gpu::{GpuKernel, GpuReport};
use crate::gpu_idle::{DeviceIdle, RULE};
use crate::text_fmt::{h, hopt, name, table};

fn kernel_rows(title: &str, v: &[GpuKernel]) -> String {
    if v.is_empty() {
        return String::new();
    }
    let mut rows = vec![["TIME", "COUNT", "MEAN", "LAUNCH->START", "KERNEL"].map(String::from).to_vec()];
    rows.extend(
        v.iter()
            .map(|k| vec![h(k.ns), k.count.to_string(), hopt(k.mean_ns), hopt(k.mean_launch_delay_ns), k.name.clone()]),
    );
    // Numbers right-aligned, the name left free (it can be long).
    let w: Vec<usize> = (0..4).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut s = format!("  top kernels by {title}:\n");
    for r in &rows {
        let _ = writeln!(
            s,
            "    {:>w0$}  {:>w1$}  {:>w2$}  {:>w3$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3]
        );
    }
    s
}

/// ` in N what`; nothing when no count is known (plain folded input).
fn times(n: u64, what: &str) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" in {n} {what}")
    }
}

/// The GPU section: busy time per device, top kernels, copies, memsets,
/// the CPU's synchronization waits, and what was lost.
pub fn gpu_section(g: &GpuReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "GPU: busy {} (summed activity time: concurrent kernels overlap, so it can exceed the wall time; not part of any thread's wall clock)",
        h(g.busy_ns)
    );
    if !g.devices.is_empty() {
        let mut rows =
            vec![["DEVICE", "BUSY", "KERNELS", "N", "MEMCPY", "N", "MEMSET", "N"].map(String::from).to_vec()];
        rows.extend(g.devices.iter().map(|d| {
            vec![
                d.device.map_or("-".to_string(), |x| x.to_string()),
                h(d.busy_ns),
                h(d.kernel_ns),
                d.kernel_count.to_string(),
                h(d.memcpy_ns),
                d.memcpy_count.to_string(),
                h(d.memset_ns),
                d.memset_count.to_string(),
            ]
        }));
        s.push_str(&table(&rows, 1, "  "));
    }
    let _ = writeln!(s, "  kernels: {}{}, {} distinct", h(g.kernel_ns), times(g.kernel_count, "launch(es)"), g.kernels);
    // Both orders say something; when they agree, one list is enough.
    let same = g.top_kernels_by_ns.iter().map(|k| &k.name).eq(g.top_kernels_by_count.iter().map(|k| &k.name));
    s.push_str(&kernel_rows(if same { "time (and count)" } else { "time" }, &g.top_kernels_by_ns));
    if !same {
        s.push_str(&kernel_rows("count", &g.top_kernels_by_count));
    }
    let kinds: Vec<String> = g.memcpy.by_kind.iter().map(|c| format!("{} {} x{}", c.name, h(c.ns), c.count)).collect();
    let _ = writeln!(
        s,
        "  copies: {}{}, {} bytes{}",
        h(g.memcpy.ns),
        times(g.memcpy.count, "copies"),
        g.memcpy.bytes,
        if kinds.is_empty() { String::new() } else { format!(" ({})", kinds.join(", ")) }
    );
    let _ = writeln!(s, "  memsets: {}{}", h(g.memset.ns), times(g.memset.count, "memset(s)"));
    let _ = writeln!(s, "  CPU waiting in GPU synchronization: {}{}", h(g.sync.ns), times(g.sync.count, "call(s)"));
    if !g.sync.threads.is_empty() {
        let mut rows = vec![["TID", "NAME", "WAIT", "CALLS"].map(String::from).to_vec()];
        rows.extend(
            g.sync
                .threads
                .iter()
                .map(|t| vec![t.tid.to_string(), name(&t.comm).to_string(), h(t.ns), t.count.to_string()]),
        );
        s.push_str(&table(&rows, 2, "    "));
    }
    let _ = writeln!(
        s,
        "  lost: records dropped {}, unmatched (no launch stack) {}, CUPTI unavailable {}, tid mismatch {}, bad lines {}; CUPTI overhead {}",
        g.records_dropped,
        g.unmatched,
        g.cupti_unavailable,
        g.tid_mismatch,
        g.bad_lines,
        h(g.cupti_overhead_ns)
    );
    for d in &g.idle {
        s.push_str(&idle_section(d));
    }
    s
}

fn pc(ns: u64, whole: u64) -> String {
    if whole == 0 {
        return "-".into();
    }
    format!("{:.1}%", ns as f64 * 100.0 / whole as f64)
}

/// `GPU 0 idle 37% of 10 s: train was on-CPU 12% (collate), sleeping 61% (...)`,
/// then each launching thread's idle time by state and place.
pub fn idle_section(d: &DeviceIdle) -> String {
    let dev = d.device.map_or("-".to_string(), |x| x.to_string());
    let mut s = format!(
        "GPU {dev} idle {} of {} (its first to last activity; busy {}, concurrent activities once):",
        pc(d.idle_ns, d.window_ns),
        h(d.window_ns),
        h(d.busy_ns)
    );
    let mut heads = Vec::new();
    for t in &d.threads {
        let mut parts = vec![format!("on-CPU {}{}", pc(t.on_ns, d.idle_ns), match t.on_functions.first() {
            Some((f, _)) => format!(" ({f})"),
            None => String::new(),
        })];
        if let Some(w) = t.off.first() {
            parts.push(format!("{} {} ({})", w.state.map_or("off-CPU".into(), |x| x.label().to_string()), pc(w.ns, d.idle_ns), w.place));
        }
        if t.gil_ns > 0 {
            parts.push(format!("GIL {}", pc(t.gil_ns, d.idle_ns)));
        }
        heads.push(format!("{} was {}", name(&t.comm), parts.join(", ")));
    }
    s.push_str(&format!(" {}\n", heads.join("; ")));
    for st in &d.streams {
        let _ = writeln!(
            s,
            "  stream {}: busy {}, idle {}",
            st.stream.map_or("-".to_string(), |x| x.to_string()),
            h(st.busy_ns),
            pc(st.idle_ns, d.window_ns)
        );
    }
    let _ = writeln!(s, "  while it was idle ({} = 100%; launching {RULE}):", h(d.idle_ns));
    for t in &d.threads {
        let _ = writeln!(s, "    {} ({}), {} launch(es):", name(&t.comm), t.tid, t.launches);
        let funcs: Vec<String> = t.on_functions.iter().map(|(f, p)| format!("{f} {p:.0}%")).collect();
        let mut rows = vec![vec![
            pc(t.on_ns, d.idle_ns),
            h(t.on_ns),
            format!("[on-CPU] (its on-CPU functions over the whole window: {})", if funcs.is_empty() { "none sampled".into() } else { funcs.join(", ") }),
        ]];
        // Every place with 0.1% of the idle time or more; the rest summed.
        let shown = |ns: u64| ns as u128 * 1000 >= d.idle_ns as u128;
        rows.extend(t.off.iter().filter(|w| shown(w.ns)).map(|w| vec![pc(w.ns, d.idle_ns), h(w.ns), w.place.clone()]));
        let rest: Vec<u64> = t.off.iter().filter(|w| !shown(w.ns)).map(|w| w.ns).collect();
        if !rest.is_empty() {
            let ns = rest.iter().sum();
            rows.push(vec![pc(ns, d.idle_ns), h(ns), format!("({} more place(s), each under 0.1%)", rest.len())]);
        }
        if t.uncovered_ns > 0 {
            rows.push(vec![pc(t.uncovered_ns, d.idle_ns), h(t.uncovered_ns), "(not in its timeline: not alive, or dropped)".into()]);
        }
        let w0 = rows.iter().map(|r| r[0].len()).max().unwrap_or(0);
        let w1 = rows.iter().map(|r| r[1].chars().count()).max().unwrap_or(0);
        for r in rows {
            let _ = writeln!(s, "      {:>w0$}  {:>w1$}  {}", r[0], r[1], r[2]);
        }
    }
    s
}
