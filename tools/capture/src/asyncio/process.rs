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

use super::layout::Layout;
use super::objects::{dict_get, set_keys, small_int, type_name};
use crate::python::offsets::FRAME_OWNED_BY_CSTACK;
use crate::python::reader::Interpreter;

/// Coroutines followed down one task's await chain, at most.
const MAX_CHAIN: usize = 64;
/// Python frames walked up a thread to a running task's coroutine.
const MAX_FRAMES: usize = 1024;

/// One task at one tick.
pub struct Seen {
    pub task: u64,
    /// The future it waits on (0: none): one wait ends where another
    /// begins at the same place.
    pub waiter: u64,
    pub name: Rc<str>,
    /// Folded frames, outermost coroutine first.
    pub stack: Rc<str>,
    /// The leaf: `[sleep]`, `[awaiting Future]`, `[ready]`, `[running]`...
    pub what: Rc<str>,
    pub waiting: bool,
}

/// What `asyncio.tasks` holds, found once.
struct Found {
    /// The WeakSet's set of weak references.
    weakrefs: u64,
    /// `_eager_tasks` (3.12+; 0: none).
    eager: u64,
    /// `asyncio.tasks.Task`, the C `_asyncio.Task`.
    task_type: u64,
}

/// A code object's folded frame, and whether it is `asyncio.sleep`.
struct Code {
    frame: Rc<str>,
    sleep: bool,
}

pub struct AsyncioProcess {
    it: Interpreter,
    lay: &'static Layout,
    found: Option<Found>,
    /// When `asyncio.tasks` was last looked for, and how long until the
    /// next look: 50 ms doubling to a second (a program imports it as it
    /// starts, or late: a service that never does costs one look a second).
    looked: Option<(Instant, Duration)>,
    types: HashMap<u64, Rc<str>>,
    names: HashMap<(u64, u64), Rc<str>>,
    codes: HashMap<u64, Code>,
    /// Code objects checked this tick (one freed and another made at its
    /// address is named anew).
    checked: HashSet<u64>,
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
    pub fn new(it: Interpreter, lay: &'static Layout) -> AsyncioProcess {
        AsyncioProcess {
            it,
            lay,
            found: None,
            looked: None,
            types: HashMap::new(),
            names: HashMap::new(),
            codes: HashMap::new(),
            checked: HashSet::new(),
            stacks: HashSet::new(),
            leaves: HashMap::new(),
            cursor: 0,
            unreadable: 0,
            pure_python: None,
        }
    }

    fn find(&mut self) -> Option<Found> {
        let it = &self.it;
        let interp = it.u64(it.runtime() + it.offsets.runtime_interpreters_head).ok()?;
        let modules = it.u64(interp + self.lay.interp_modules).ok()?;
        let tasks = dict_get(it, modules, "asyncio.tasks")?;
        let globals = it.u64(tasks + 16).ok()?; // PyModuleObject.md_dict
        let task_type = dict_get(it, globals, "Task")?;
        let weakset = dict_get(it, globals, self.lay.all_tasks)?;
        let weakrefs = it.attr(weakset, "data")?;
        let eager = self.lay.eager_tasks.and_then(|n| dict_get(it, globals, n)).unwrap_or(0);
        if let Some(n) = type_name(it, task_type).filter(|n| n != "_asyncio.Task") {
            self.pure_python.get_or_insert(n);
            return None;
        }
        Some(Found { weakrefs, eager, task_type })
    }

    /// Every pending task read (at most `budget` of them: a rotating
    /// subset past it), and how many tasks there are. None: no asyncio
    /// (yet: looked for again once a second).
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
        self.it.new_turn();
        self.checked.clear();
        let mut refs = Vec::new();
        set_keys(&self.it, weakrefs, &mut refs)?;
        // PyWeakReference.wr_object; a dead one's is None, and a deleted
        // entry's dummy key points at no Task: both fail the type check.
        let mut tasks: Vec<u64> = refs.iter().filter_map(|&r| self.it.u64(r + 16).ok()).collect();
        if eager != 0 {
            set_keys(&self.it, eager, &mut tasks);
        }
        tasks.sort_unstable();
        tasks.dedup();
        let all = tasks.len();
        if all > budget {
            self.cursor %= all;
            tasks.rotate_left(self.cursor);
            tasks.truncate(budget);
            self.cursor += budget;
        }
        let mut threads = None;
        let mut seen = Vec::with_capacity(tasks.len());
        let mut head = vec![0u8; self.lay.task_bytes()];
        for t in tasks {
            if self.it.read(t, &mut head).is_err() {
                continue;
            }
            let word = |at: u64| u64::from_le_bytes(head[at as usize..at as usize + 8].try_into().unwrap());
            // Not a Task (a dead reference), or one done (the WeakSet
            // keeps it until it is freed).
            if word(8) != task_type || head[self.lay.fut_state as usize] != 0 {
                continue;
            }
            let (coro, waiter, name) = (word(self.lay.task_coro), word(self.lay.task_fut_waiter), word(self.lay.task_name));
            let name = self.task_name(t, name);
            seen.push(self.task(t, coro, waiter, name, &mut threads));
        }
        Some((seen, all))
    }

    fn task(&mut self, task: u64, coro: u64, waiter: u64, name: Rc<str>, threads: &mut Option<Vec<(u32, u64)>>) -> Seen {
        let lay = self.lay;
        let mut frames: Vec<Rc<str>> = Vec::new();
        let mut sleep = false;
        let mut at = coro;
        let mut b = vec![0u8; lay.coro_bytes()];
        let what = 'walk: {
            for depth in 0..MAX_CHAIN {
                if self.it.read(at, &mut b).is_err() {
                    break 'walk None;
                }
                let word = |o: u64| u64::from_le_bytes(b[o as usize..o as usize + 8].try_into().unwrap());
                let state = b[lay.coro_frame_state as usize] as i8;
                let frame = at + lay.coro_iframe;
                let o = self.it.offsets;
                let code = word(lay.coro_iframe + o.frame_code);
                if depth == 0 && state == lay.executing {
                    // Its frames are on a thread's stack now: from the
                    // coroutine's down to the innermost (or, the thread
                    // gone on meanwhile, the coroutine's own).
                    if !self.running(frame, threads, &mut frames) {
                        let Some(c) = self.code(code) else { break 'walk None };
                        frames.push(c.frame.clone());
                    }
                    break 'walk Some("[running]");
                }
                let Some(c) = self.code(code) else { break 'walk None };
                frames.push(c.frame.clone());
                sleep = c.sleep;
                let stacktop = i32::from_le_bytes(b[(lay.coro_iframe + lay.frame_stacktop) as usize..][..4].try_into().unwrap());
                if state == lay.created {
                    break 'walk Some("[ready]");
                }
                if state != lay.suspended_await || stacktop < 1 {
                    break;
                }
                let Ok(awaited) = self.it.u64(frame + o.frame_localsplus + 8 * (stacktop as u64 - 1)) else { break 'walk None };
                match self.type_of(awaited).as_deref() {
                    Some("coroutine") => at = awaited,
                    Some(_) => break,
                    None => break 'walk None,
                }
            }
            // Suspended: on its future, unless that is done (the task is
            // then scheduled to resume: ready).
            if waiter == 0 {
                break 'walk Some("[ready]");
            }
            let wt = self.type_of(waiter);
            let Some(wt) = wt else { break 'walk None };
            if matches!(&*wt, "_asyncio.Future" | "_asyncio.Task") {
                match self.it.u8(waiter + lay.fut_state) {
                    Ok(0) => {}
                    Ok(_) => break 'walk Some("[ready]"),
                    Err(_) => break 'walk None,
                }
            }
            if sleep {
                break 'walk Some("[sleep]");
            }
            let short = wt.strip_prefix("_asyncio.").unwrap_or(&wt).to_string();
            let leaf = format!("[awaiting {short}]");
            return self.seen(task, waiter, name, &frames, &leaf, true);
        };
        match what {
            Some(w) => self.seen(task, waiter, name, &frames, w, w == "[sleep]"),
            None => {
                self.unreadable += 1;
                self.seen(task, waiter, name, &frames, "[unreadable]", false)
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
        Seen { task, waiter: if waiting { waiter } else { 0 }, name, stack, what, waiting }
    }

    /// The frames of the thread running the coroutine whose frame is
    /// `frame`, from that one in: true when a thread runs it.
    fn running(&mut self, frame: u64, threads: &mut Option<Vec<(u32, u64)>>, out: &mut Vec<Rc<str>>) -> bool {
        let o = self.it.offsets;
        if threads.is_none() {
            *threads = Some(self.it.thread_states().unwrap_or_default());
        }
        for &(_, ts) in threads.as_deref().unwrap_or_default() {
            let Ok(mut f) = self.it.u64(ts + o.tstate_frame) else { continue };
            if let (Some(c), true) = (o.cframe_current, f != 0) {
                let Ok(cur) = self.it.u64(f + c) else { continue };
                f = cur;
            }
            let mut chain = Vec::new();
            while f != 0 && chain.len() < MAX_FRAMES {
                let cstack = o.minor >= 12 && self.it.u8(f + o.frame_owner).ok() == Some(FRAME_OWNED_BY_CSTACK);
                if !cstack {
                    chain.push(self.it.u64(f + o.frame_code).unwrap_or(0));
                }
                if f == frame {
                    out.extend(chain.iter().rev().filter_map(|&c| self.code(c).map(|c| c.frame.clone())));
                    return true;
                }
                let Ok(prev) = self.it.u64(f + o.frame_previous) else { break };
                f = prev;
            }
        }
        false
    }

    /// The folded frame of code object `code`, named as the main
    /// profile names Python frames (`py::QUALNAME:FILE`).
    fn code(&mut self, code: u64) -> Option<&Code> {
        if !self.checked.contains(&code) || !self.codes.contains_key(&code) {
            let (name, file, ..) = self.it.code(code).ok()?;
            let frame = wallclock_stream::names::check(&format!("py::{name}:{file}")).into_owned();
            if self.codes.get(&code).is_none_or(|c| *c.frame != *frame) {
                let sleep = name == "sleep" && file.ends_with("/asyncio/tasks.py") && super::tally::stdlib_asyncio(&file);
                let frame = wallclock_stream::folded::escape(&frame).into_owned().into();
                self.codes.insert(code, Code { frame, sleep });
            }
            self.checked.insert(code);
        }
        self.codes.get(&code)
    }

    fn type_of(&mut self, obj: u64) -> Option<Rc<str>> {
        let tp = self.it.u64(obj + 8).ok()?;
        if let Some(n) = self.types.get(&tp) {
            return Some(n.clone());
        }
        let n: Rc<str> = type_name(&self.it, tp)?.into();
        self.types.insert(tp, n.clone());
        Some(n)
    }

    /// `Task.get_name()`: the str it was given, or (3.13, by default) its
    /// number, formatted as get_name() formats it.
    fn task_name(&mut self, task: u64, name: u64) -> Rc<str> {
        if let Some(n) = self.names.get(&(task, name)) {
            return n.clone();
        }
        let n: Rc<str> = match self.type_of(name).as_deref() {
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
