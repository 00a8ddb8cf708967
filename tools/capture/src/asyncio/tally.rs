//! What the task samples add up to: task-time per stack (the folded
//! file), per state, and the longest waits seen (one task seen waiting on
//! the same future at the same place at every sample of it).

use std::collections::HashMap;
use std::io::Write;
use std::rc::Rc;

use super::process::Seen;

const LONGEST: usize = 10;
const TOP_STACKS: usize = 10;

struct Streak {
    name: Rc<str>,
    what: Rc<str>,
    stack: Rc<str>,
    waiter: u64,
    since_us: f64,
    until_us: f64,
}

/// A tick `now_us` after the start, `dt_us` after the one before; each
/// task read stands for `scale` tasks.
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
    /// Task-µs per folded line (stack;leaf).
    lines: HashMap<String, f64>,
    /// Task-µs and the most tasks at one tick, per process and leaf.
    by_what: HashMap<(u32, Rc<str>), (f64, f64)>,
    live: HashMap<(u32, u64), Streak>,
    done: Vec<(u32, Streak)>,
    /// Processes sampled: pid → (name, most tasks at one tick, µs sampled).
    pub procs: HashMap<u32, (String, usize, f64)>,
    pub ticks: u64,
    pub subset_ticks: u64,
    pub tick_ns_total: u64,
    pub tick_ns_max: u64,
    pub unreadable: u64,
    pub sampled_us: f64,
    /// Said in the report: processes whose tasks were not read, and why.
    pub notes: Vec<String>,
}

fn span(s: &Streak) -> f64 {
    s.until_us - s.since_us
}

impl Tally {
    pub fn new(hz: u64, budget: usize) -> Tally {
        Tally { hz, budget, ..Tally::default() }
    }

    /// One process's tasks (`all` of them, `seen` read) at a tick.
    pub fn add(&mut self, pid: u32, name: &str, seen: &[Seen], all: usize, t: Tick) {
        let Tick { now_us, dt_us, scale } = t;
        let weight_us = dt_us * scale;
        let p = self.procs.entry(pid).or_insert_with(|| (name.to_string(), 0, 0.0));
        p.1 = p.1.max(all);
        p.2 += dt_us;
        // One folded line built per distinct (stack, leaf), not per task.
        let mut per_line: HashMap<(usize, usize), (&Seen, f64)> = HashMap::new();
        let mut counts: HashMap<Rc<str>, f64> = HashMap::new();
        for s in seen {
            per_line.entry((Rc::as_ptr(&s.stack) as *const u8 as usize, Rc::as_ptr(&s.what) as *const u8 as usize)).or_insert((s, 0.0)).1 += weight_us;
            *counts.entry(s.what.clone()).or_default() += scale;
            let key = (pid, s.task);
            let same = self.live.get(&key).is_some_and(|k| k.waiter == s.waiter && Rc::ptr_eq(&k.what, &s.what) && Rc::ptr_eq(&k.stack, &s.stack));
            if !s.waiting {
                if let Some(k) = self.live.remove(&key) {
                    self.done.push((pid, k));
                }
            } else if same {
                self.live.get_mut(&key).unwrap().until_us = now_us;
            } else {
                let k = Streak { name: s.name.clone(), what: s.what.clone(), stack: s.stack.clone(), waiter: s.waiter, since_us: now_us - dt_us, until_us: now_us };
                if let Some(old) = self.live.insert(key, k) {
                    self.done.push((pid, old));
                }
            }
        }
        for (s, us) in per_line.into_values() {
            let leaf = wallclock_stream::folded::escape(&s.what).into_owned();
            let line = if s.stack.is_empty() { leaf } else { format!("{};{leaf}", s.stack) };
            *self.lines.entry(line).or_default() += us;
        }
        for (w, c) in counts {
            let e = self.by_what.entry((pid, w)).or_default();
            e.0 += c * dt_us;
            e.1 = e.1.max(c);
        }
        // Tasks gone (done, or not in this tick's subset) end their waits.
        if self.live.len() > 4 * self.budget {
            let gone: Vec<_> = self.live.iter().filter(|(_, s)| s.until_us < now_us).map(|(k, _)| *k).collect();
            for k in gone {
                let s = self.live.remove(&k).unwrap();
                self.done.push((k.0, s));
            }
        }
        if self.done.len() > 4 * LONGEST {
            self.done.sort_by(|a, b| span(&b.1).total_cmp(&span(&a.1)));
            self.done.truncate(LONGEST);
        }
    }

    /// The folded lines, task-µs rounded.
    pub fn write_folded(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut v: Vec<_> = self.lines.iter().map(|(k, &us)| (k, us.round() as u64)).filter(|l| l.1 > 0).collect();
        v.sort_unstable();
        for (k, us) in v {
            writeln!(out, "{k} {us}")?;
        }
        Ok(())
    }

    /// The TASKS section of the report.
    pub fn write_report(mut self, out: &mut dyn Write) -> std::io::Result<()> {
        let secs = self.sampled_us / 1e6;
        writeln!(out, "TASKS (asyncio task-seconds sampled at {} Hz over {secs:.1} s; not in the per-thread totals)", self.hz)?;
        for n in &self.notes {
            writeln!(out, "  {n}")?;
        }
        if self.subset_ticks > 0 {
            writeln!(out, "  {} of {} ticks read a rotating subset of {} tasks, each standing for its share of all", self.subset_ticks, self.ticks, self.budget)?;
        }
        if self.ticks > 0 {
            writeln!(out, "  cost: {:.3} ms of CPU per tick on average, {:.3} ms at most", self.tick_ns_total as f64 / self.ticks as f64 / 1e6, self.tick_ns_max as f64 / 1e6)?;
        }
        if self.unreadable > 0 {
            writeln!(out, "  {} task reads failed (their time is under [unreadable])", self.unreadable)?;
        }
        let mut procs: Vec<_> = self.procs.iter().collect();
        procs.sort_by_key(|p| p.0);
        for (&pid, (name, most, us)) in procs {
            let secs = us / 1e6;
            writeln!(out, "  process {name} (pid {pid}): up to {most} tasks, sampled for {secs:.1} s")?;
            writeln!(out, "    state                        task-s   mean   most")?;
            let mut w: Vec<_> = self.by_what.iter().filter(|e| e.0 .0 == pid).collect();
            w.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
            for ((_, what), (us, most)) in w {
                let mean = if secs > 0.0 { us / 1e6 / secs } else { 0.0 };
                writeln!(out, "    {:<24} {:>11.2} {:>6.1} {:>6.0}", what, us / 1e6, mean, most)?;
            }
        }
        writeln!(out, "  top waiting stacks (task-s):")?;
        let waiting = |k: &str| !k.ends_with("[running]") && !k.ends_with("[ready]");
        let mut lines: Vec<_> = self.lines.iter().filter(|(k, _)| waiting(k)).collect();
        lines.sort_by(|a, b| b.1.total_cmp(a.1));
        for (k, us) in lines.into_iter().take(TOP_STACKS) {
            writeln!(out, "    {:>9.2}  {k}", us / 1e6)?;
        }
        let live = std::mem::take(&mut self.live);
        self.done.extend(live.into_iter().map(|((p, _), s)| (p, s)));
        self.done.sort_by(|a, b| span(&b.1).total_cmp(&span(&a.1)));
        writeln!(out, "  tasks waiting longest (seen waiting on one future at every sample of them):")?;
        for (pid, s) in self.done.iter().take(LONGEST) {
            // The program's own innermost coroutine, not asyncio's sleep.
            let own = s.stack.rsplit(';').find(|f| !stdlib_asyncio(f)).or_else(|| s.stack.rsplit(';').next()).unwrap_or(&s.stack);
            writeln!(out, "    {:>8.2} s  task {:?} (pid {pid}) {} in {own}", span(s) / 1e6, &*s.name, s.what)?;
        }
        Ok(())
    }
}

/// A frame of asyncio itself (`py::sleep:/usr/lib/python3.11/asyncio/tasks.py`:
/// a file in `asyncio/` of a `python3.N` library directory).
pub fn stdlib_asyncio(frame: &str) -> bool {
    frame.match_indices("/asyncio/").any(|(at, _)| frame[..at].rsplit('/').next().is_some_and(|d| d.starts_with("python3.")))
}

#[cfg(test)]
mod tests {
    use super::stdlib_asyncio;

    #[test]
    fn asyncios_own_frames_by_their_library_directory() {
        assert!(stdlib_asyncio("py::sleep:/usr/lib/python3.11/asyncio/tasks.py"));
        assert!(stdlib_asyncio("py::sleep:/root/.pyenv/versions/3.12.1/lib/python3.12/asyncio/tasks.py"));
        // A program that lives in a directory of that name is the program's.
        assert!(!stdlib_asyncio("py::fetch:/work/tests/programs/asyncio/workers.py"));
        assert!(!stdlib_asyncio("py::fetch:app.py"));
    }
}
