//! The report for humans: aligned columns, human units.

use std::fmt::Write as _;

use wallclock_stream::units::human_ns;

use crate::gpu::{GpuKernel, GpuReport};
use crate::report::{ProcessReport, Report, ThreadReport, TopStack};

fn h(ns: u64) -> String {
    human_ns(ns)
}

/// A name for display: `-` when unknown (plain folded input).
fn name(comm: &str) -> &str {
    if comm.is_empty() {
        "-"
    } else {
        comm
    }
}

fn hopt(ns: Option<u64>) -> String {
    ns.map_or("-".to_string(), human_ns)
}

fn p(pct: Option<f64>) -> String {
    pct.map_or("-".to_string(), |v| format!("{v:.1}%"))
}

/// Columns: the first `left` left-aligned, the rest right-aligned.
fn table(rows: &[Vec<String>], left: usize, indent: &str) -> String {
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

/// Header lines: window, tools, everything lost.
pub fn summary(r: &Report) -> String {
    let mut s = String::new();
    let tools = if r.tools.is_empty() { "plain folded input".to_string() } else { r.tools.join(", ") };
    let _ = writeln!(
        s,
        "wall-clock report: window {} ({}), {} process(es), {} thread(s)",
        hopt(r.window.wall_ns),
        tools,
        r.processes.len(),
        r.threads.len()
    );
    let _ = writeln!(s, "[short blocks] {}   [lost stack] {}", h(r.short_blocks_ns), h(r.lost_stack_ns));
    let counts = |m: &std::collections::BTreeMap<String, u64>| {
        if m.is_empty() {
            "none reported".to_string()
        } else {
            m.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
        }
    };
    let _ = writeln!(s, "lost (header): {}", counts(&r.lost));
    let _ = writeln!(s, "stats: {}", counts(&r.stats));
    s
}

fn process_line(pr: &ProcessReport) -> String {
    let o = &pr.off_ns;
    let mut s = format!(
        "PROCESS {} ({}): wall {}, {} thread(s) alive {} thread-time; on-CPU {}, off-CPU {} (R {}, S {}, D {}, other {})",
        pr.pid,
        name(&pr.comm),
        hopt(pr.wall_ns),
        pr.threads,
        h(pr.thread_ns),
        h(pr.on_ns),
        h(pr.off_total_ns),
        h(o.r),
        h(o.s),
        h(o.d),
        h(o.other)
    );
    if pr.gpu_ns > 0 {
        let _ = write!(s, ", GPU {}", h(pr.gpu_ns));
    }
    let _ = write!(s, ", coverage {}", p(pr.coverage_pct));
    s.push('\n');
    s
}

fn thread_header() -> Vec<String> {
    ["TID", "NAME", "ROLE", "CLASS", "ALIVE", "ON-CPU", "RUNNABLE", "SLEEPING", "UNINTR", "OTHER", "GPU", "COVERAGE"]
        .map(String::from)
        .to_vec()
}

fn thread_row(t: &ThreadReport) -> Vec<String> {
    vec![
        t.tid.to_string(),
        name(&t.comm).to_string(),
        t.role.clone(),
        t.class.clone(),
        hopt(t.alive_ns),
        h(t.on_ns),
        h(t.off_ns.r),
        h(t.off_ns.s),
        h(t.off_ns.d),
        h(t.off_ns.other),
        if t.gpu_ns > 0 { h(t.gpu_ns) } else { "-".to_string() },
        p(t.coverage_pct),
    ]
}

/// The thread table of the processes.
pub fn overview(r: &Report) -> String {
    let mut s = summary(r);
    for pr in &r.processes {
        s.push('\n');
        s.push_str(&process_line(pr));
        let mut rows = vec![thread_header()];
        rows.extend(r.threads.iter().filter(|t| t.pid == pr.pid).map(thread_row));
        s.push_str(&table(&rows, 4, "  "));
    }
    if let Some(g) = &r.gpu {
        s.push('\n');
        s.push_str(&gpu_section(g));
    }
    s
}

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
    s
}

/// Leaf first, at most a few frames: what a reader wants to see first.
/// The scheduler's own frames under the state leaf say nothing and go.
fn short_stack(text: &str) -> String {
    const SCHED: &[&str] = &["__schedule_[k]", "schedule_[k]", "preempt_schedule_common_[k]", "__cond_resched_[k]"];
    let frames: Vec<&str> = text.split(';').collect();
    let mut rev: Vec<&str> = frames.iter().rev().copied().collect();
    let leaf = if rev.first().is_some_and(|f| f.starts_with('[')) { Some(rev.remove(0)) } else { None };
    let skipped = rev.iter().take_while(|f| SCHED.contains(f)).count();
    let rest = &rev[skipped..];
    let shown: Vec<&str> = leaf.into_iter().chain(rest.iter().take(6).copied()).collect();
    let mut s = shown.join(" <- ");
    if rest.len() > 6 {
        s.push_str(" <- ...");
    }
    s
}

fn tops(title: &str, v: &[TopStack]) -> String {
    if v.is_empty() {
        return String::new();
    }
    let rows: Vec<Vec<String>> = v.iter().map(|t| vec![p(t.pct), h(t.ns), short_stack(&t.stack)]).collect();
    // Right-align the numbers, leave the stack text free.
    let mut s = format!("  top {title} stacks:\n");
    let w0 = rows.iter().map(|r| r[0].len()).max().unwrap_or(0);
    let w1 = rows.iter().map(|r| r[1].len()).max().unwrap_or(0);
    for r in rows {
        let _ = writeln!(s, "    {:>w0$}  {:>w1$}  {}", r[0], r[1], r[2]);
    }
    s
}

/// One thread in detail.
pub fn thread_detail(t: &ThreadReport) -> String {
    let mut s = format!("THREAD {} {} (pid {}, role {}, {})\n", t.tid, name(&t.comm), t.pid, t.role, t.class);
    let base = t.alive_ns;
    let share = |ns: u64| {
        base.filter(|b| *b > 0).map(|b| format!(" ({:.1}%)", ns as f64 * 100.0 / b as f64)).unwrap_or_default()
    };
    let o = &t.off_ns;
    let _ = writeln!(
        s,
        "  alive {}   on-CPU {}{}   off-CPU {}{}   coverage {}",
        hopt(t.alive_ns),
        h(t.on_ns),
        share(t.on_ns),
        h(t.off_total_ns),
        share(t.off_total_ns),
        p(t.coverage_pct)
    );
    if t.steal_ns > 0 {
        let _ = writeln!(s, "  of the on-CPU time, steal (the hypervisor ran something else) {}{}", h(t.steal_ns), share(t.steal_ns));
    }
    let _ = writeln!(
        s,
        "  off-CPU by state: runnable {}{}, sleeping {}{}, uninterruptible {}{}, other {}{}",
        h(o.r),
        share(o.r),
        h(o.s),
        share(o.s),
        h(o.d),
        share(o.d),
        h(o.other),
        share(o.other)
    );
    if t.gpu_ns > 0 {
        let _ = writeln!(s, "  GPU {} (launched by this thread; not part of its wall-clock time)", h(t.gpu_ns));
    }
    if t.gpu_sync_ns > 0 {
        let _ = writeln!(s, "  waiting in GPU synchronization {}{}", h(t.gpu_sync_ns), share(t.gpu_sync_ns));
    }
    let _ = writeln!(s, "  [short blocks] {}   [lost stack] {}", h(t.short_blocks_ns), h(t.lost_stack_ns));
    s.push_str(&tops("on-CPU", &t.top.on));
    s.push_str(&tops("off-CPU", &t.top.off));
    s.push_str(&tops("GPU", &t.top.gpu));
    s.push_str(&tops("unclassified", &t.top.other));
    s
}

/// The whole report: overview, then every thread.
pub fn full(r: &Report) -> String {
    let mut s = overview(r);
    for t in &r.threads {
        s.push('\n');
        s.push_str(&thread_detail(t));
    }
    s
}

/// The file of one thread: the summary, its row, its detail.
pub fn thread_file(r: &Report, t: &ThreadReport) -> String {
    let mut s = summary(r);
    s.push('\n');
    s.push_str(&table(&[thread_header(), thread_row(t)], 4, "  "));
    s.push('\n');
    s.push_str(&thread_detail(t));
    s
}
