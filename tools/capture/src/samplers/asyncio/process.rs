//! One Python process's asyncio tasks, read from outside at each tick:
//! `asyncio.tasks` (found in `sys.modules`) holds the WeakSet of every
//! scheduled task, `_asyncio`'s own (3.11 `_all_tasks`, 3.12+
//! `_scheduled_tasks`, and 3.12+ `_eager_tasks`, a set of the tasks running
//! their first step eagerly); the WeakSet's `data` is a set of weak
//! references, each to a `_asyncio.Task`. For each pending Task: its
//! coroutine, and from it the chain of awaited coroutines (a suspended
//! coroutine's awaited object is the top of its frame's value stack, as
//! `cr_await` reads it) down to the innermost one, and the future the
//! Task waits on (`task_fut_waiter`).

use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::batch;
use super::chain::{word, Chains, End, Walk};
use super::layout::Layout;
use super::names::Names;
use super::objects::{dict_get, set_keys, small_int, type_name};
use crate::samplers::tally::Seen;
use crate::runtimes::python::reader::Interpreter;

/// Tasks followed down one list, at most (a list changed while read
/// could loop).
const MAX_LISTED: usize = 1 << 20;

/// `_asyncio`'s `_AsyncioDebug` (section `.AsyncioDebug`, 13 words) in
/// `pid`: in the interpreter's file `interp` (3.15 builds the module in)
/// or the `_asyncio` module it maps (3.14), through the process's root.
fn asyncio_debug(pid: u32, interp: &str) -> Option<[u64; 13]> {
    use object::{Object, ObjectSection};
    let maps = wallclock_stream::procmaps::read(pid)?;
    let mut files = vec![interp.to_string()];
    for m in maps {
        let p = m.entry.path;
        if p.rsplit('/').next().is_some_and(|n| n.starts_with("_asyncio.")) && !files.contains(&p) {
            files.push(p);
        }
    }
    files.iter().find_map(|f| {
        let data = crate::elf::map_file(&format!("/proc/{pid}/root{f}")).or_else(|| crate::elf::map_file(f))?;
        let obj = object::File::parse(&*data).ok()?;
        let d = obj.section_by_name(".AsyncioDebug")?.data().ok()?;
        let words: Vec<u64> = d.get(..104)?.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        words.try_into().ok()
    })
}

/// What `asyncio.tasks` holds, found once.
struct Found {
    /// The WeakSet's set of weak references (3.14+: pure-Python tasks
    /// only, and 0 when not read; the C Tasks are in lists).
    weakrefs: u64,
    /// `_eager_tasks` (3.12+; 0: none).
    eager: u64,
    /// `asyncio.tasks.Task`, the C `_asyncio.Task`.
    task_type: u64,
}

pub struct AsyncioProcess {
    pub(super) it: Interpreter,
    pub(super) lay: Layout,
    found: Option<Found>,
    /// When `asyncio.tasks` was last looked for, and how long until the
    /// next look: 50 ms doubling to a second (a program imports it as it
    /// starts, or late: a service that never does costs one look a second).
    looked: Option<(Instant, Duration)>,
    /// Code objects' frames and types' names (names.rs).
    objects: Names,
    names: HashMap<(u64, u64), Rc<str>>,
    stacks: HashSet<Rc<str>>,
    leaves: HashMap<String, Rc<str>>,
    cursor: usize,
    /// Tasks whose chain could not be read whole (a read failed: the
    /// task freed meanwhile, or a torn pointer), kept under `[unreadable]`.
    pub unreadable: u64,
    /// Said once: `asyncio.tasks.Task` is not the C Task.
    pub pure_python: Option<String>,
}

impl AsyncioProcess {
    pub fn new(it: Interpreter, lay: Layout) -> AsyncioProcess {
        AsyncioProcess {
            it,
            lay,
            found: None,
            looked: None,
            objects: Names::default(),
            names: HashMap::new(),
            stacks: HashSet::new(),
            leaves: HashMap::new(),
            cursor: 0,
            unreadable: 0,
            pure_python: None,
        }
    }

    fn find(&mut self) -> Option<Found> {
        if self.lay.minor >= 14 && self.lay.lists.is_none() {
            // `_asyncio`'s table: in the executable (3.15) or its module,
            // once imported (3.14).
            let t = asyncio_debug(self.it.pid(), &self.it.path)?;
            if !self.lay.add_asyncio(&t) {
                return None;
            }
        }
        let it = &self.it;
        let interp = it.u64(it.runtime() + it.offsets.runtime_interpreters_head).ok()?;
        let modules = it.u64(interp + self.lay.interp_modules).ok()?;
        let tasks = dict_get(it, modules, "asyncio.tasks")?;
        let globals = it.u64(tasks + 16).ok()?; // PyModuleObject.md_dict
        let task_type = dict_get(it, globals, "Task")?;
        let weakset = dict_get(it, globals, self.lay.all_tasks);
        let weakrefs = match weakset.and_then(|w| it.attr(w, "data")) {
            Some(w) => w,
            None if self.lay.lists.is_some() => 0,
            None => return None,
        };
        let eager = self.lay.eager_tasks.and_then(|n| dict_get(it, globals, n)).unwrap_or(0);
        if let Some(n) = type_name(it, task_type).filter(|n| n != "_asyncio.Task") {
            self.pure_python.get_or_insert(n);
            return None;
        }
        Some(Found { weakrefs, eager, task_type })
    }

    /// Every pending task read (at most `budget` of them: a rotating
    /// subset past it), and how many tasks there are. None: no asyncio
    /// (yet: looked for again, see `looked`). Each step of the walk reads
    /// one field of every task in one system call (`batch`).
    pub fn tick(&mut self, budget: usize) -> Option<(Vec<Seen>, usize)> {
        if self.found.is_none() {
            let wait = match self.looked {
                Some((t, wait)) if t.elapsed() < wait => return None,
                Some((_, wait)) => (wait * 2).min(Duration::from_secs(1)),
                None => Duration::from_millis(50),
            };
            self.looked = Some((Instant::now(), wait));
            self.found = self.find();
        }
        let f = self.found.as_ref()?;
        let (weakrefs, eager, task_type) = (f.weakrefs, f.eager, f.task_type);
        let lay = self.lay;
        let pid = self.it.pid();
        self.it.new_turn();
        self.objects.new_tick();
        let mut refs = Vec::new();
        if weakrefs != 0 {
            set_keys(&self.it, weakrefs, &mut refs)?;
        }
        let mut tasks = Vec::new();
        if eager != 0 {
            set_keys(&self.it, eager, &mut tasks);
        }
        if let Some(l) = lay.lists {
            self.listed(l, &mut tasks);
        }
        let all = refs.len() + tasks.len();
        if all > budget {
            // A rotating subset of the weak references (the eager tasks,
            // running their first step, are few).
            self.cursor %= refs.len().max(1);
            refs.rotate_left(self.cursor);
            refs.truncate(budget.saturating_sub(tasks.len()).max(1));
            self.cursor += refs.len();
        }
        let (mut buf, mut ok) = (Vec::new(), Vec::new());
        // PyWeakReference.wr_object; a dead one's is None, and a deleted
        // entry's dummy key points at no Task: both fail the type check.
        let at: Vec<u64> = refs.iter().map(|r| r + 16).collect();
        batch::read(pid, &at, 8, &mut buf, &mut ok);
        tasks.extend((0..refs.len()).filter(|&i| ok[i]).map(|i| word(&buf, i * 8)));
        tasks.sort_unstable();
        tasks.dedup();
        let size = lay.task_bytes();
        batch::read(pid, &tasks, size, &mut buf, &mut ok);
        let mut walks = Vec::with_capacity(tasks.len());
        for (i, &t) in tasks.iter().enumerate() {
            let head = &buf[i * size..(i + 1) * size];
            // Not a Task (a dead reference), or one done (the WeakSet
            // keeps it until it is freed).
            if !ok[i] || word(head, 8) != task_type || head[lay.fut_state as usize] != 0 {
                continue;
            }
            let (coro, waiter, name) = (word(head, lay.task_coro as usize), word(head, lay.task_fut_waiter as usize), word(head, lay.task_name as usize));
            walks.push(Walk { task: t, waiter, name, at: coro, frames: Vec::new(), sleep: false, end: End::Walking });
        }
        let mut chains = Chains { it: &mut self.it, lay: self.lay, names: &mut self.objects };
        chains.walk(&mut walks);
        chains.waiters(&mut walks);
        let mut seen = Vec::with_capacity(walks.len());
        for w in walks {
            let name = self.task_name(w.task, w.name);
            let (what, waiting): (&str, bool) = match w.end {
                End::Leaf(l) => (l, l == "[sleep]"),
                End::Awaiting(ref l) => (l, true),
                End::Walking | End::Waiter | End::Unreadable => {
                    self.unreadable += 1;
                    ("[unreadable]", false)
                }
            };
            let what = what.to_string();
            seen.push(self.seen(w.task, w.waiter, name, &w.frames, &what, waiting));
        }
        Some((seen, all))
    }

    /// 3.14+: the C Tasks, from each thread state's list and the
    /// interpreter's (the tasks of threads that ended).
    fn listed(&mut self, l: super::layout::Lists, out: &mut Vec<u64>) {
        let mut heads: Vec<u64> = self.it.thread_states().unwrap_or_default().iter().map(|&(_, ts)| ts + l.tstate_head).collect();
        let it = &self.it;
        if let Ok(interp) = it.u64(it.runtime() + it.offsets.runtime_interpreters_head) {
            heads.push(interp + l.interp_head);
        }
        for head in heads {
            let Ok(mut node) = it.u64(head) else { continue };
            let mut n = 0;
            while node != head && node != 0 && n < MAX_LISTED {
                out.push(node - l.task_node);
                n += 1;
                let Ok(next) = it.u64(node) else { break };
                node = next;
            }
        }
    }

    fn seen(&mut self, task: u64, waiter: u64, name: Rc<str>, frames: &[Rc<str>], what: &str, waiting: bool) -> Seen {
        let key = frames.iter().map(|f| &**f).collect::<Vec<_>>().join(";");
        let stack = match self.stacks.get(key.as_str()) {
            Some(s) => s.clone(),
            None => {
                let s: Rc<str> = key.into();
                self.stacks.insert(s.clone());
                s
            }
        };
        let what = match self.leaves.get(what) {
            Some(w) => w.clone(),
            None => {
                let w: Rc<str> = what.into();
                self.leaves.insert(what.to_string(), w.clone());
                w
            }
        };
        Seen { id: task, waiter: if waiting { waiter } else { 0 }, name: Some(name), stack, what, waiting }
    }

    /// `Task.get_name()`: the str it was given, or (3.13, by default) its
    /// number, formatted as get_name() formats it.
    fn task_name(&mut self, task: u64, name: u64) -> Rc<str> {
        if let Some(n) = self.names.get(&(task, name)) {
            return n.clone();
        }
        let tp = self.it.u64(name + 8).ok().and_then(|tp| self.objects.type_name(&self.it, tp));
        let n: Rc<str> = match tp.as_deref() {
            Some("str") => self.it.string(name).map(|s| wallclock_stream::names::check(&s).into_owned()).unwrap_or_else(|_| "?".into()).into(),
            Some("int") => small_int(&self.it, name, self.lay.minor).map_or_else(|| "Task-?".into(), |n| format!("Task-{n}")).into(),
            _ => "?".into(),
        };
        if self.names.len() > 100_000 {
            self.names.clear();
        }
        self.names.insert((task, name), n.clone());
        n
    }
}
