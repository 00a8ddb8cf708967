//! Per process: its threads summed, named by its main thread (the name
//! after exec), heaviest first.

use std::collections::BTreeMap;

use wallclock_stream::pgen::pgen_of;
use wallclock_stream::{StateNs, Thread};

use crate::model::{pct, ProcessReport, ThreadReport, Window};

pub fn processes(ts: &[ThreadReport], threads: &BTreeMap<crate::model::ThreadKey, Thread>, w: &Window) -> Vec<ProcessReport> {
    // A process is (pid, pgen): a pid used again is another process.
    let mut by: BTreeMap<(u32, u32), Vec<&ThreadReport>> = BTreeMap::new();
    for t in ts {
        by.entry((t.pid, pgen_of(t.pgen))).or_default().push(t);
    }
    let mut out = by
        .into_iter()
        .map(|((pid, pgen), v)| {
            let comm = threads
                .get(&(pid, pgen, pid))
                .map(|t| t.comm.clone())
                .filter(|c| !c.is_empty())
                .unwrap_or_else(|| most_common(v.iter().map(|t| t.comm.as_str())));
            let mut off = StateNs::default();
            for t in &v {
                off.add(&t.off_ns);
            }
            let on_ns: u64 = v.iter().map(|t| t.on_ns).sum();
            let thread_ns: u64 = v.iter().filter_map(|t| t.alive_ns).sum();
            let wall_ns = w.wall_ns.or_else(|| {
                let s = v.iter().filter_map(|t| t.start_ns).min()?;
                let e = v.iter().filter_map(|t| t.end_ns).max()?;
                Some(e.saturating_sub(s))
            });
            ProcessReport {
                pid,
                pgen: (pgen > 0).then_some(pgen),
                comm,
                threads: v.len(),
                wall_ns,
                thread_ns,
                on_ns,
                off_total_ns: off.total(),
                off_ns: off,
                gpu_ns: v.iter().map(|t| t.gpu_ns).sum(),
                gpu_sync_ns: v.iter().map(|t| t.gpu_sync_ns).sum(),
                other_ns: v.iter().map(|t| t.other_ns).sum(),
                coverage_pct: pct(on_ns + off.total(), Some(thread_ns)),
            }
        })
        .collect::<Vec<_>>();
    // Heaviest first, so that a shell's child doing the work is not lost
    // among short-lived helpers; ties by pid, so the order is stable.
    out.sort_by(|a, b| b.thread_ns.cmp(&a.thread_ns).then(b.on_ns.cmp(&a.on_ns)).then(a.pid.cmp(&b.pid)).then(a.pgen.cmp(&b.pgen)));
    out
}

/// The most common non-empty name (ties: the first in order), else "".
fn most_common<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut n: Vec<(&str, usize)> = Vec::new();
    for c in names.filter(|c| !c.is_empty()) {
        match n.iter_mut().find(|(x, _)| *x == c) {
            Some(e) => e.1 += 1,
            None => n.push((c, 1)),
        }
    }
    n.iter()
        .fold(None::<(&str, usize)>, |best, &(c, k)| match best {
            Some((_, bk)) if bk >= k => best,
            _ => Some((c, k)),
        })
        .map(|(c, _)| c.to_string())
        .unwrap_or_default()
}
