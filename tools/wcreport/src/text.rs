//! The report for humans: aligned columns, human units.

use std::fmt::Write as _;

use wallclock_stream::pgen::pgen_suffix;

use crate::report::{ProcessReport, Report, ThreadReport, TopStack};
use crate::text_fmt::{h, name, p, table, time, unit_of};

/// Header lines: window, tools, everything lost.
pub fn summary(r: &Report) -> String {
    unit_of(r);
    let mut s = String::new();
    let tools = if r.tools.is_empty() { "plain folded input".to_string() } else { r.tools.join(", ") };
    let _ = writeln!(
        s,
        "wall-clock report: window {} ({}), {} process(es), {} thread(s)",
        time(r.window.wall_ns),
        tools,
        r.processes.len(),
        r.threads.len()
    );
    if let Some(ev) = &r.event {
        let every = r.event_period.map(|p| format!(", a sample every {p}")).unwrap_or_default();
        let _ = writeln!(s, "unit: {ev} (an event profile{every}): its values count {ev}, not time");
    }
    if !r.kernel_lacks.is_empty() {
        let _ = writeln!(s, "kernel lacks: {} (docs/kernels.md: what the capture does without them)", r.kernel_lacks.join(", "));
    }
    let _ = writeln!(s, "{}[lost stack] {}", short_blocks(r.short_blocks_ns), h(r.lost_stack_ns));
    let counts = |m: &std::collections::BTreeMap<String, u64>| {
        if m.is_empty() {
            "none reported".to_string()
        } else {
            m.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
        }
    };
    let _ = writeln!(s, "lost (header): {}", counts(&r.lost));
    let _ = writeln!(s, "stats: {}", counts(&r.stats));
    let _ = writeln!(s, "{}", crate::text_where::LEGEND);
    let total: u64 = r.threads.iter().map(|t| t.on_ns + t.off_total_ns + t.other_ns).sum();
    s.push_str(&crate::text_where::unnamed_section(&r.unnamed, total));
    s.push_str(&crate::runtimes::section(&r.runtimes));
    s
}

fn process_line(pr: &ProcessReport) -> String {
    let o = &pr.off_ns;
    let mut s = format!(
        "PROCESS {}{} ({}): wall {}, {} thread(s) alive {} thread-time; on-CPU {}, off-CPU {} (R {}, S {}, D {}, other {})",
        pr.pid,
        pgen_suffix(pr.pgen),
        name(&pr.comm),
        time(pr.wall_ns),
        pr.threads,
        time((pr.thread_ns > 0).then_some(pr.thread_ns)),
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
        time(t.alive_ns),
        h(t.on_ns),
        h(t.off_ns.r),
        h(t.off_ns.s),
        h(t.off_ns.d),
        h(t.off_ns.other),
        if t.gpu_ns > 0 { h(t.gpu_ns) } else { "-".to_string() },
        p(t.coverage_pct),
    ]
}

/// Several processes: one row per command name before their sections.
fn push_commands(s: &mut String, r: &Report) {
    let c = crate::text_commands::commands_section(r);
    if !c.is_empty() {
        s.push('\n');
        s.push_str(&c);
    }
}

/// Whether `t` is a thread of `pr` (the same pid and generation).
fn of_process(t: &ThreadReport, pr: &ProcessReport) -> bool {
    t.pid == pr.pid && t.pgen == pr.pgen
}

/// A process's line and its thread table.
fn process_table(r: &Report, pr: &ProcessReport) -> String {
    let mut s = process_line(pr);
    let mut rows = vec![thread_header()];
    rows.extend(r.threads.iter().filter(|t| of_process(t, pr)).map(thread_row));
    s.push_str(&table(&rows, 4, "  "));
    s
}

/// The thread table of the processes.
pub fn overview(r: &Report) -> String {
    let mut s = summary(r);
    push_commands(&mut s, r);
    for pr in &r.processes {
        s.push('\n');
        s.push_str(&process_table(r, pr));
    }
    if let Some(g) = &r.gpu {
        s.push('\n');
        s.push_str(&crate::text_gpu::gpu_section(g));
    }
    if !r.waits_on.is_empty() {
        s.push('\n');
        s.push_str(&waits_on(r));
    }
    if !r.waited_on.is_empty() {
        s.push('\n');
        s.push_str(&waited_on(r));
    }
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

/// One thread in detail; `max_parts`: the ways of one function shown.
pub fn thread_detail(t: &ThreadReport, max_parts: usize) -> String {
    let mut s = format!("THREAD {} {} (pid {}{}, role {}, {})\n", t.tid, name(&t.comm), t.pid, pgen_suffix(t.pgen), t.role, t.class);
    let base = t.alive_ns;
    let share = |ns: u64| {
        base.filter(|b| *b > 0).map(|b| format!(" ({:.1}%)", ns as f64 * 100.0 / b as f64)).unwrap_or_default()
    };
    let o = &t.off_ns;
    let _ = writeln!(
        s,
        "  alive {}   on-CPU {}{}   off-CPU {}{}   coverage {}",
        time(t.alive_ns),
        h(t.on_ns),
        share(t.on_ns),
        h(t.off_total_ns),
        share(t.off_total_ns),
        p(t.coverage_pct)
    );
    if t.steal_ns > 0 {
        let _ = writeln!(
            s,
            "  of the on-CPU time, steal (the hypervisor ran something else) {}{}",
            h(t.steal_ns),
            share(t.steal_ns)
        );
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
    if t.gil_ns > 0 {
        let _ = writeln!(s, "  of the off-CPU time, waiting for the GIL {}{}", h(t.gil_ns), share(t.gil_ns));
    }
    let _ = writeln!(s, "  {}[lost stack] {}", short_blocks(t.short_blocks_ns), h(t.lost_stack_ns));
    // The whole stacks stay in the folded files and in --json.
    s.push_str(&crate::text_where::where_time_went(t, max_parts));
    s.push_str(&tops("GPU", &t.top.gpu));
    s.push_str(&woken_by(&t.top.off));
    s
}

/// The top off-CPU stacks that wakers ended, each with its wakers.
fn woken_by(v: &[TopStack]) -> String {
    if v.iter().all(|t| t.wakers.is_empty()) {
        return String::new();
    }
    let mut s = "  top off-CPU stacks and who woke them:\n".to_string();
    for t in v.iter().filter(|t| !t.wakers.is_empty()) {
        let _ = writeln!(s, "    {:>6}  {:>9}  {}", p(t.pct), h(t.ns), short_stack(&t.stack));
        for w in &t.wakers {
            let _ = writeln!(s, "      woken by {} in {}: {} times, {}", w.who, w.func, w.count, h(w.ns));
        }
    }
    s
}

/// Who waits on whom: per pair, the waiter's blocked time the other ended.
fn waits_on(r: &Report) -> String {
    if r.waits_on.is_empty() {
        return String::new();
    }
    let mut rows = vec![vec!["WAITER".to_string(), "WAITS ON".into(), "TIME".into(), "WAKE-UPS".into()]];
    for w in &r.waits_on {
        rows.push(vec![format!("{} ({})", name(&w.comm), w.tid), w.waker.clone(), h(w.ns), w.count.to_string()]);
    }
    format!("WAITS ON (blocked time each waiter's wakers ended)\n{}", table(&rows, 2, "  "))
}

/// What the off-CPU time waited on: each object, its heaviest threads
/// and the sites it was waited at.
fn waited_on(r: &Report) -> String {
    let mut rows = vec![vec!["OBJECT".to_string(), "TIME".into(), "BLOCKS".into(), "THREADS".into(), "WHERE".into()]];
    for w in &r.waited_on {
        let threads: Vec<String> = w.threads.iter().map(|t| format!("{} ({}) {}", name(&t.comm), t.tid, h(t.ns))).collect();
        let sites: Vec<String> = w.sites.iter().take(1).map(|s| format!("{} {}", s.site, h(s.ns))).collect();
        // A lock named by its call site: its address too, as a core dump shows it.
        let raw: Vec<&str> = w.raw.iter().map(|r| r.strip_prefix("lock ").unwrap_or(r)).collect();
        let object = if raw.is_empty() { format!("[{}]", w.object) } else { format!("[{}] ({})", w.object, raw.join(", ")) };
        rows.push(vec![object, h(w.ns), w.count.to_string(), threads.join(", "), sites.join(", ")]);
    }
    format!("WAITED ON (off-CPU time by what it waited for: file, socket, lock, child)\n{}", table(&rows, 2, "  "))
}

/// The whole report: the summary, then each process (heaviest first) with
/// its thread table and its threads in detail, then the GPU section.
pub fn full(r: &Report, max_parts: usize) -> String {
    let mut s = summary(r);
    push_commands(&mut s, r);
    for pr in &r.processes {
        s.push('\n');
        s.push_str(&process_table(r, pr));
        for t in r.threads.iter().filter(|t| of_process(t, pr)) {
            s.push('\n');
            s.push_str(&thread_detail(t, max_parts));
        }
    }
    if let Some(g) = &r.gpu {
        s.push('\n');
        s.push_str(&crate::text_gpu::gpu_section(g));
    }
    if !r.waits_on.is_empty() {
        s.push('\n');
        s.push_str(&waits_on(r));
    }
    if !r.waited_on.is_empty() {
        s.push('\n');
        s.push_str(&waited_on(r));
    }
    s
}

/// The file of one thread: the summary, its row, its detail.
pub fn thread_file(r: &Report, t: &ThreadReport, max_parts: usize) -> String {
    let mut s = summary(r);
    s.push('\n');
    s.push_str(&table(&[thread_header(), thread_row(t)], 4, "  "));
    s.push('\n');
    s.push_str(&thread_detail(t, max_parts));
    s
}

/// `[short blocks] T   `, only for a stream that has them: offcputime now
/// keeps every block under its own stack, so for its streams it is 0.
fn short_blocks(ns: u64) -> String {
    if ns == 0 {
        String::new()
    } else {
        format!("[short blocks] {}   ", h(ns))
    }
}
