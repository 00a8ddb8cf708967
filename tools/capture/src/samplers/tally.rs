//! What a sampler's ticks add up to: time per stack (the folded file),
//! per state or wait reason, and the longest waits seen (one goroutine
//! or task seen waiting for the same thing at the same place at every
//! sample of it). One tally for every sampler; a [`Kind`] says how its
//! report names things.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::io::Write;
use std::rc::Rc;

use rustc_hash::FxHashMap;

const LONGEST: usize = 10;
const TOP_STACKS: usize = 10;

/// One goroutine or task as seen at one tick.
pub struct Seen {
    /// The goroutine's id, the task's address.
    pub id: u64,
    /// The future a task waits on (0: none): one wait ends where another
    /// begins at the same place.
    pub waiter: u64,
    /// A task's name (a goroutine has none).
    pub name: Option<Rc<str>>,
    /// The leaf: `[chan receive]`, `[sleep]`, `[running]`...
    pub what: Rc<str>,
    pub waiting: bool,
    /// Folded frames from the root, without the leaf.
    pub stack: Rc<str>,
}

/// How a sampler's report names what it samples.
pub struct Kind {
    /// `goroutine`, `task`.
    pub unit: &'static str,
    /// The report's first line, up to the rate.
    pub title: &'static str,
    /// After the number of failed reads.
    pub unreadable: &'static str,
    /// The per-process table's head.
    pub columns: &'static str,
    /// The longest waits' head.
    pub longest: &'static str,
    /// Lines ending so are not waits (left out of the top waiting stacks).
    pub busy: &'static [&'static str],
    /// A line of an empty stack is its leaf alone (else `;leaf`).
    pub bare_leaf: bool,
    /// Past 4 budgets of streaks, those not seen at the last tick end (a
    /// task done, or not in its subset).
    pub prune: bool,
    /// The program's own frame of a stack, to say where one waits.
    pub own: fn(&str) -> &str,
}

struct Streak {
    id: u64,
    name: Option<Rc<str>>,
    what: Rc<str>,
    stack: Rc<str>,
    waiter: u64,
    since_us: f64,
    until_us: f64,
}

fn span(s: &Streak) -> f64 {
    s.until_us - s.since_us
}

/// A tick `now_us` after the start, `dt_us` after the one before; each
/// one read stands for `scale`.
#[derive(Clone, Copy)]
pub struct Tick {
    pub now_us: f64,
    pub dt_us: f64,
    pub scale: f64,
}

pub struct Tally {
    kind: &'static Kind,
    pub hz: u64,
    pub budget: usize,
    /// The fewest read per process at one tick (the CPU budget's doing).
    pub budget_least: usize,
    /// µs per folded line (stack;leaf).
    lines: HashMap<String, f64>,
    /// µs and the most at one tick, per process and leaf.
    by_what: HashMap<(u32, Rc<str>), (f64, f64)>,
    live: FxHashMap<(u32, u64), Streak>,
    done: Vec<(u32, Streak)>,
    /// Processes sampled: pid → (name, most at one tick, µs sampled).
    pub procs: HashMap<u32, (String, usize, f64)>,
    pub ticks: u64,
    pub subset_ticks: u64,
    pub tick_ns_total: u64,
    pub tick_ns_max: u64,
    pub unreadable: u64,
    pub sampled_us: f64,
    /// Said in the report: processes not read, and why.
    pub notes: Vec<String>,
}

impl Tally {
    pub fn new(kind: &'static Kind, hz: u64, budget: usize) -> Tally {
        Tally {
            kind,
            hz,
            budget,
            budget_least: budget,
            lines: HashMap::new(),
            by_what: HashMap::new(),
            live: FxHashMap::default(),
            done: Vec::new(),
            procs: HashMap::new(),
            ticks: 0,
            subset_ticks: 0,
            tick_ns_total: 0,
            tick_ns_max: 0,
            unreadable: 0,
            sampled_us: 0.0,
            notes: Vec::new(),
        }
    }

    /// One process's goroutines or tasks (`all` of them, `seen` read) at
    /// a tick.
    pub fn add(&mut self, pid: u32, name: &str, seen: &[Seen], all: usize, t: Tick) {
        let Tick { now_us, dt_us, scale } = t;
        // Each one read stands for its share of those not read.
        let weight_us = dt_us * scale;
        let p = self.procs.entry(pid).or_insert_with(|| (name.to_string(), 0, 0.0));
        p.1 = p.1.max(all);
        p.2 += dt_us;
        // Per (stack, leaf) and per leaf first, by the shared strings'
        // addresses (each process's are interned): one folded line built
        // and one leaf looked up per distinct one, not per goroutine
        // (thousands a tick).
        let mut per_line: FxHashMap<(usize, usize), (&Seen, f64)> = FxHashMap::default();
        let mut counts: FxHashMap<usize, (&Rc<str>, f64)> = FxHashMap::default();
        for s in seen {
            let what = Rc::as_ptr(&s.what) as *const u8 as usize;
            per_line.entry((Rc::as_ptr(&s.stack) as *const u8 as usize, what)).or_insert((s, 0.0)).1 += weight_us;
            counts.entry(what).or_insert((&s.what, 0.0)).1 += scale;
        }
        for (s, us) in per_line.into_values() {
            let leaf = wallclock_stream::folded::escape(&s.what).into_owned();
            let line = if s.stack.is_empty() && self.kind.bare_leaf { leaf } else { format!("{};{leaf}", s.stack) };
            *self.lines.entry(line).or_default() += us;
        }
        for s in seen {
            self.streak(pid, s, now_us, dt_us);
        }
        for (w, c) in counts.into_values() {
            let e = self.by_what.entry((pid, w.clone())).or_default();
            e.0 += c * dt_us;
            e.1 = e.1.max(c);
        }
        if self.kind.prune && self.live.len() > 4 * self.budget {
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

    /// A wait goes on (the same thing awaited at the same place), ends,
    /// or begins.
    fn streak(&mut self, pid: u32, s: &Seen, now_us: f64, dt_us: f64) {
        let key = (pid, s.id);
        if !s.waiting {
            if let Some(k) = self.live.remove(&key) {
                self.done.push((pid, k));
            }
            return;
        }
        let k = || Streak { id: s.id, name: s.name.clone(), what: s.what.clone(), stack: s.stack.clone(), waiter: s.waiter, since_us: now_us - dt_us, until_us: now_us };
        match self.live.entry(key) {
            Entry::Occupied(mut e) if e.get().waiter == s.waiter && Rc::ptr_eq(&e.get().what, &s.what) && Rc::ptr_eq(&e.get().stack, &s.stack) => e.get_mut().until_us = now_us,
            Entry::Occupied(mut e) => {
                let old = e.insert(k());
                self.done.push((pid, old));
            }
            Entry::Vacant(e) => {
                e.insert(k());
            }
        }
    }

    /// The folded lines, µs rounded.
    pub fn write_folded(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut v: Vec<_> = self.lines.iter().map(|(k, &us)| (k, us.round() as u64)).filter(|l| l.1 > 0).collect();
        v.sort_unstable();
        for (k, us) in v {
            writeln!(out, "{k} {us}")?;
        }
        Ok(())
    }

    /// The report's section (GOROUTINES, TASKS).
    pub fn write_report(mut self, out: &mut dyn Write) -> std::io::Result<()> {
        let k = self.kind;
        let secs = self.sampled_us / 1e6;
        writeln!(out, "{} sampled at {} Hz over {secs:.1} s; not in the per-thread totals)", k.title, self.hz)?;
        for n in &self.notes {
            writeln!(out, "  {n}")?;
        }
        if self.subset_ticks > 0 {
            let most = if self.budget_least < self.budget { format!("{} to {}", self.budget_least, self.budget) } else { self.budget.to_string() };
            writeln!(out, "  {} of {} ticks read a rotating subset of {most} {}s, each standing for its share of all (the sampler keeps to {}% of a CPU)", self.subset_ticks, self.ticks, k.unit, super::CPU_SHARE * 100.0)?;
        }
        if self.ticks > 0 {
            writeln!(out, "  cost: {:.3} ms of CPU per tick on average, {:.3} ms at most", self.tick_ns_total as f64 / self.ticks as f64 / 1e6, self.tick_ns_max as f64 / 1e6)?;
        }
        if self.unreadable > 0 {
            writeln!(out, "  {} {}", self.unreadable, k.unreadable)?;
        }
        self.write_procs(out)?;
        writeln!(out, "  top waiting stacks ({}-s):", k.unit)?;
        let mut lines: Vec<_> = self.lines.iter().filter(|(l, _)| !k.busy.iter().any(|b| l.ends_with(b))).collect();
        lines.sort_by(|a, b| b.1.total_cmp(a.1));
        for (l, us) in lines.into_iter().take(TOP_STACKS) {
            writeln!(out, "    {:>9.2}  {l}", us / 1e6)?;
        }
        let live = std::mem::take(&mut self.live);
        self.done.extend(live.into_iter().map(|((p, _), s)| (p, s)));
        self.done.sort_by(|a, b| span(&b.1).total_cmp(&span(&a.1)));
        writeln!(out, "  {}", k.longest)?;
        for (pid, s) in self.done.iter().take(LONGEST) {
            let who = match &s.name {
                Some(n) => format!("{} {:?}", k.unit, &**n),
                None => format!("{} {}", k.unit, s.id),
            };
            writeln!(out, "    {:>8.2} s  {who} (pid {pid}) {} in {}", span(s) / 1e6, s.what, (k.own)(&s.stack))?;
        }
        Ok(())
    }

    /// Each process's table: time per state or wait reason.
    fn write_procs(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut procs: Vec<_> = self.procs.iter().collect();
        procs.sort_by_key(|p| p.0);
        for (&pid, (name, most, us)) in procs {
            let secs = us / 1e6;
            writeln!(out, "  process {name} (pid {pid}): up to {most} {}s, sampled for {secs:.1} s", self.kind.unit)?;
            writeln!(out, "    {}", self.kind.columns)?;
            let mut w: Vec<_> = self.by_what.iter().filter(|e| e.0 .0 == pid).collect();
            w.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
            for ((_, what), (us, most)) in w {
                let mean = if secs > 0.0 { us / 1e6 / secs } else { 0.0 };
                writeln!(out, "    {:<24} {:>11.2} {:>6.1} {:>6.0}", what, us / 1e6, mean, most)?;
            }
        }
        Ok(())
    }
}
