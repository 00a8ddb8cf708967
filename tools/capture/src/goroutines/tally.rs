//! What the goroutine samples add up to: goroutine-time per stack (the
//! folded file), per state or wait reason, and the longest waits seen
//! (one goroutine seen waiting for the same reason at the same place at
//! every sample of it).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::io::Write;
use std::rc::Rc;

use rustc_hash::FxHashMap;

use super::process::Seen;

const LONGEST: usize = 10;
const TOP_STACKS: usize = 10;

struct Streak {
    what: Rc<str>,
    stack: Rc<str>,
    since_us: f64,
    until_us: f64,
}

/// A tick `now_us` after the start, `dt_us` after the one before; each
/// goroutine read stands for `scale` goroutines.
#[derive(Clone, Copy)]
pub struct Tick {
    pub now_us: f64,
    pub dt_us: f64,
    pub scale: f64,
}

#[derive(Default)]
pub struct Tally {
    pub hz: u64,
    pub budget: usize,
    /// Goroutine-µs per folded line (stack;leaf).
    lines: HashMap<String, f64>,
    /// Goroutine-µs and the most goroutines at one tick, per process and leaf.
    by_what: HashMap<(u32, Rc<str>), (f64, f64)>,
    live: FxHashMap<(u32, u64), Streak>,
    done: Vec<(u32, u64, Streak)>,
    /// Processes sampled: pid → (name, most goroutines at one tick, µs
    /// sampled).
    pub procs: HashMap<u32, (String, usize, f64)>,
    pub ticks: u64,
    pub subset_ticks: u64,
    pub tick_ns_total: u64,
    pub tick_ns_max: u64,
    pub unreadable: u64,
    pub sampled_us: f64,
}

impl Tally {
    pub fn new(hz: u64, budget: usize) -> Tally {
        Tally { hz, budget, ..Tally::default() }
    }

    /// One process's goroutines (`all` of them, `seen` read) at a tick.
    pub fn add(&mut self, pid: u32, name: &str, seen: &[Seen], all: usize, t: Tick) {
        let Tick { now_us, dt_us, scale } = t;
        // Each goroutine read stands for its share of those not read.
        let weight_us = dt_us * scale;
        let p = self.procs.entry(pid).or_insert_with(|| (name.to_string(), 0, 0.0));
        p.1 = p.1.max(all);
        p.2 += dt_us;
        // Goroutines per (stack, leaf) and per leaf first, by the shared
        // strings' addresses: one folded line built and one leaf looked
        // up per distinct one, not per goroutine (thousands a tick).
        let mut per_line: FxHashMap<(usize, usize), (&Seen, f64)> = FxHashMap::default();
        let mut counts: FxHashMap<usize, (&Rc<str>, f64)> = FxHashMap::default();
        for s in seen {
            let what = Rc::as_ptr(&s.what) as *const u8 as usize;
            per_line.entry((Rc::as_ptr(&s.stack) as *const u8 as usize, what)).or_insert((s, 0.0)).1 += weight_us;
            counts.entry(what).or_insert((&s.what, 0.0)).1 += scale;
        }
        for (s, us) in per_line.into_values() {
            let leaf = wallclock_stream::folded::escape(&s.what).into_owned();
            *self.lines.entry(format!("{};{leaf}", s.stack)).or_default() += us;
        }
        for s in seen {
            let key = (pid, s.goid);
            if !s.waiting {
                if let Some(k) = self.live.remove(&key) {
                    self.done.push((pid, s.goid, k));
                }
                continue;
            }
            let k = || Streak { what: s.what.clone(), stack: s.stack.clone(), since_us: now_us - dt_us, until_us: now_us };
            match self.live.entry(key) {
                Entry::Occupied(mut e) if Rc::ptr_eq(&e.get().what, &s.what) && Rc::ptr_eq(&e.get().stack, &s.stack) => e.get_mut().until_us = now_us,
                Entry::Occupied(mut e) => {
                    let old = e.insert(k());
                    self.done.push((pid, s.goid, old));
                }
                Entry::Vacant(e) => {
                    e.insert(k());
                }
            }
        }
        for (w, c) in counts.into_values() {
            let e = self.by_what.entry((pid, w.clone())).or_default();
            e.0 += c * dt_us;
            e.1 = e.1.max(c);
        }
        if self.done.len() > 4 * LONGEST {
            self.done.sort_by(|a, b| (b.2.until_us - b.2.since_us).total_cmp(&(a.2.until_us - a.2.since_us)));
            self.done.truncate(LONGEST);
        }
    }

    /// The folded lines, goroutine-µs rounded.
    pub fn write_folded(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut v: Vec<_> = self.lines.iter().map(|(k, &us)| (k, us.round() as u64)).filter(|l| l.1 > 0).collect();
        v.sort_unstable();
        for (k, us) in v {
            writeln!(out, "{k} {us}")?;
        }
        Ok(())
    }

    /// The GOROUTINES section of the report.
    pub fn write_report(mut self, out: &mut dyn Write) -> std::io::Result<()> {
        let secs = self.sampled_us / 1e6;
        writeln!(out, "GOROUTINES (goroutine-seconds sampled at {} Hz over {secs:.1} s; not in the per-thread totals)", self.hz)?;

        if self.subset_ticks > 0 {
            writeln!(out, "  {} of {} ticks read a rotating subset of {} goroutines, each standing for its share of all", self.subset_ticks, self.ticks, self.budget)?;
        }
        if self.ticks > 0 {
            writeln!(out, "  cost: {:.3} ms of CPU per tick on average, {:.3} ms at most", self.tick_ns_total as f64 / self.ticks as f64 / 1e6, self.tick_ns_max as f64 / 1e6)?;
        }
        if self.unreadable > 0 {
            writeln!(out, "  {} goroutine reads failed (counted nowhere else)", self.unreadable)?;
        }
        let mut procs: Vec<_> = self.procs.iter().collect();
        procs.sort_by_key(|p| p.0);
        for (&pid, (name, most, us)) in procs {
            let secs = us / 1e6;
            writeln!(out, "  process {name} (pid {pid}): up to {most} goroutines, sampled for {secs:.1} s")?;
            writeln!(out, "    state or wait reason      goroutine-s  mean   most")?;
            let mut w: Vec<_> = self.by_what.iter().filter(|e| e.0 .0 == pid).collect();
            w.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
            for ((_, what), (us, most)) in w {
                let mean = if secs > 0.0 { us / 1e6 / secs } else { 0.0 };
                writeln!(out, "    {:<24} {:>11.2} {:>6.1} {:>6.0}", what, us / 1e6, mean, most)?;
            }
        }
        writeln!(out, "  top waiting stacks (goroutine-s):")?;
        let mut lines: Vec<_> = self.lines.iter().filter(|(k, _)| !k.ends_with(";[running]") && !k.ends_with(";[runnable]")).collect();
        lines.sort_by(|a, b| b.1.total_cmp(a.1));
        for (k, us) in lines.into_iter().take(TOP_STACKS) {
            writeln!(out, "    {:>9.2}  {k}", us / 1e6)?;
        }
        let live = std::mem::take(&mut self.live);
        self.done.extend(live.into_iter().map(|((p, g), s)| (p, g, s)));
        self.done.sort_by(|a, b| (b.2.until_us - b.2.since_us).total_cmp(&(a.2.until_us - a.2.since_us)));
        writeln!(out, "  goroutines waiting longest (seen waiting at every sample of them):")?;
        for (pid, goid, s) in self.done.iter().take(LONGEST) {
            // The program's own function that waits, not the runtime's.
            // (package `main`, or a path whose first element has a dot, as
            // module paths do; else the caller of the parking call).
            let own = s.stack.rsplit(';').find(|f| f.starts_with("main.") || (f.contains('/') && f.split('/').next().is_some_and(|p| p.contains('.')))).or_else(|| s.stack.rsplit(';').nth(1)).unwrap_or(&s.stack);
            writeln!(out, "    {:>8.2} s  goroutine {goid} (pid {pid}) {} in {own}", (s.until_us - s.since_us) / 1e6, s.what)?;
        }
        Ok(())
    }
}
