//! The per-command summary: a build or a system-wide capture holds
//! hundreds of short processes of a few commands (make, sh, cc, cc1, as),
//! and their per-process sections are too many to read first. One row per
//! command name sums its processes, with every pid listed below the table.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::report::{ProcessReport, Report};
use crate::text_fmt::{h, name, table};

#[derive(Default)]
struct Command<'a> {
    procs: Vec<&'a ProcessReport>,
    threads: usize,
    thread_ns: u64,
    on_ns: u64,
    r: u64,
    s: u64,
    d: u64,
    other: u64,
    gpu_ns: u64,
}

/// The section, or nothing for a single process.
pub fn commands_section(r: &Report) -> String {
    if r.processes.len() < 2 {
        return String::new();
    }
    let mut by: BTreeMap<&str, Command<'_>> = BTreeMap::new();
    for pr in &r.processes {
        let c = by.entry(name(&pr.comm)).or_default();
        c.procs.push(pr);
        c.threads += pr.threads;
        c.thread_ns += pr.thread_ns;
        c.on_ns += pr.on_ns;
        c.r += pr.off_ns.r;
        c.s += pr.off_ns.s;
        c.d += pr.off_ns.d;
        c.other += pr.off_ns.other;
        c.gpu_ns += pr.gpu_ns;
    }
    let mut cmds: Vec<(&str, Command<'_>)> = by.into_iter().collect();
    // The heaviest first, as the process sections.
    cmds.sort_by(|a, b| b.1.thread_ns.cmp(&a.1.thread_ns).then(a.0.cmp(b.0)));
    let gpu = cmds.iter().any(|(_, c)| c.gpu_ns > 0);
    let mut rows = vec![["COMMAND", "PROCESSES", "THREADS", "THREAD-TIME", "ON-CPU", "RUNNABLE", "SLEEPING", "UNINTR", "OTHER"]
        .map(String::from)
        .to_vec()];
    if gpu {
        rows[0].push("GPU".into());
    }
    for (n, c) in &cmds {
        let mut row = vec![
            n.to_string(),
            c.procs.len().to_string(),
            c.threads.to_string(),
            h(c.thread_ns),
            h(c.on_ns),
            h(c.r),
            h(c.s),
            h(c.d),
            h(c.other),
        ];
        if gpu {
            row.push(h(c.gpu_ns));
        }
        rows.push(row);
    }
    let mut s = format!("COMMANDS: {} processes of {} command(s)\n", r.processes.len(), cmds.len());
    s.push_str(&table(&rows, 1, "  "));
    s.push_str("  pids:\n");
    for (n, c) in &cmds {
        let mut pids: Vec<u32> = c.procs.iter().map(|p| p.pid).collect();
        pids.sort_unstable();
        let list: Vec<String> = pids.iter().map(u32::to_string).collect();
        let _ = writeln!(s, "    {n}: {}", list.join(" "));
    }
    s
}
