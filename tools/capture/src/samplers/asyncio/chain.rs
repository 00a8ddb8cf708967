//! Down each task's await chain, a level at a time for all tasks: each
//! step reads one field of every task in one system call (`batch`).

use std::rc::Rc;

use super::batch;
use super::layout::Layout;
use super::names::Names;
use crate::runtimes::python::offsets::owner_is_function;
use crate::runtimes::python::reader::Interpreter;

/// Coroutines followed down one task's await chain, at most.
const MAX_CHAIN: usize = 64;
/// Python frames walked up a thread to a running task's coroutine.
const MAX_FRAMES: usize = 1024;

/// How a task's walk ended (or goes on).
pub(super) enum End {
    Walking,
    /// At a suspended coroutine: its waiter says what it waits for.
    Waiter,
    Leaf(&'static str),
    Awaiting(String),
    Unreadable,
}

/// One task being read.
pub(super) struct Walk {
    pub(super) task: u64,
    pub(super) waiter: u64,
    /// Its `task_name` object.
    pub(super) name: u64,
    /// The coroutine read next.
    pub(super) at: u64,
    pub(super) frames: Vec<Rc<str>>,
    /// The innermost coroutine is asyncio.sleep.
    pub(super) sleep: bool,
    pub(super) end: End,
}

pub(super) fn word(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// What the walk of a process's await chains reads with: its
/// interpreter, its asyncio layout, the names read so far.
pub(super) struct Chains<'a> {
    pub(super) it: &'a mut Interpreter,
    pub(super) lay: Layout,
    pub(super) names: &'a mut Names,
}

impl Chains<'_> {
    /// Down every task's await chain, a level at a time.
    pub(super) fn walk(&mut self, walks: &mut [Walk]) {
        let lay = self.lay;
        let o = self.it.offsets;
        let pid = self.it.pid();
        let (mut buf, mut ok) = (Vec::new(), Vec::new());
        let mut threads = None;
        let size = lay.coro_bytes();
        for depth in 0..MAX_CHAIN {
            let live: Vec<usize> = (0..walks.len()).filter(|&i| matches!(walks[i].end, End::Walking)).collect();
            if live.is_empty() {
                return;
            }
            let at: Vec<u64> = live.iter().map(|&i| walks[i].at).collect();
            batch::read(pid, &at, size, &mut buf, &mut ok);
            // Where each suspended coroutine's awaited object is.
            let mut next: Vec<(usize, u64)> = Vec::new();
            for (k, &i) in live.iter().enumerate() {
                let b = &buf[k * size..(k + 1) * size];
                let w = &mut walks[i];
                if !ok[k] {
                    w.end = End::Unreadable;
                    continue;
                }
                let state = b[lay.coro_frame_state as usize] as i8;
                let frame = w.at + lay.coro_iframe;
                let code = o.code_ptr(word(b, (lay.coro_iframe + o.frame_code) as usize));
                if depth == 0 && state == lay.executing {
                    // Its frames are on a thread's stack now: from the
                    // coroutine's down to the innermost (or, the thread
                    // gone on meanwhile, the coroutine's own).
                    let mut frames = Vec::new();
                    if !self.running(frame, &mut threads, &mut frames) {
                        frames.extend(self.names.code(self.it, code).map(|c| c.frame.clone()));
                    }
                    let w = &mut walks[i];
                    w.frames = frames;
                    w.end = if w.frames.is_empty() { End::Unreadable } else { End::Leaf("[running]") };
                    continue;
                }
                // The awaited object's slot: `stacktop - 1` from the
                // frame's locals, or (3.14+) `awaited_slot` below its
                // stack pointer.
                let top = (lay.coro_iframe + lay.frame_stacktop) as usize;
                let slot = if lay.stack_pointer {
                    let sp = word(b, top);
                    let base = frame + o.frame_localsplus;
                    (sp >= base + 8 * lay.awaited_slot && sp - base < 1 << 20).then(|| sp - 8 * lay.awaited_slot)
                } else {
                    let stacktop = i32::from_le_bytes(b[top..][..4].try_into().unwrap());
                    (stacktop >= 1).then(|| frame + o.frame_localsplus + 8 * (stacktop as u64 - 1))
                };
                let Some(c) = self.names.code(self.it, code) else {
                    walks[i].end = End::Unreadable;
                    continue;
                };
                let (frame_name, sleep) = (c.frame.clone(), c.sleep);
                let w = &mut walks[i];
                w.frames.push(frame_name);
                w.sleep = sleep;
                if state == lay.created {
                    w.end = End::Leaf("[ready]");
                } else if let (true, Some(slot)) = (state == lay.suspended_await, slot) {
                    next.push((i, slot));
                } else {
                    w.end = End::Waiter;
                }
            }
            // The awaited objects, then their types: a coroutine is walked
            // into, anything else ends the chain (a FutureIter, a
            // generator-based awaitable...).
            let at: Vec<u64> = next.iter().map(|n| n.1).collect();
            batch::read(pid, &at, 8, &mut buf, &mut ok);
            // 3.14+: a stack slot is a tagged reference.
            let awaited: Vec<(usize, Option<u64>)> = next.iter().enumerate().map(|(k, n)| (n.0, ok[k].then(|| o.code_ptr(word(&buf, k * 8))))).collect();
            let at: Vec<u64> = awaited.iter().map(|a| a.1.unwrap_or(0) + 8).collect();
            batch::read(pid, &at, 8, &mut buf, &mut ok);
            for (k, &(i, obj)) in awaited.iter().enumerate() {
                let tp = (ok[k] && obj.is_some()).then(|| word(&buf, k * 8));
                let name = tp.and_then(|tp| self.names.type_name(self.it, tp));
                let w = &mut walks[i];
                match (name.as_deref(), obj) {
                    (Some("coroutine"), Some(obj)) => w.at = obj,
                    (Some(_), _) => w.end = End::Waiter,
                    _ => w.end = End::Unreadable,
                }
            }
        }
    }

    /// Suspended tasks: on their future, unless it is done (the task is
    /// then scheduled to resume: ready).
    pub(super) fn waiters(&mut self, walks: &mut [Walk]) {
        let lay = self.lay;
        let (mut buf, mut ok) = (Vec::new(), Vec::new());
        let at_waiter: Vec<usize> = (0..walks.len()).filter(|&i| matches!(walks[i].end, End::Waiter)).collect();
        let at: Vec<u64> = at_waiter.iter().map(|&i| walks[i].waiter).collect();
        let size = lay.fut_state as usize + 1;
        batch::read(self.it.pid(), &at, size, &mut buf, &mut ok);
        for (k, &i) in at_waiter.iter().enumerate() {
            let b = &buf[k * size..(k + 1) * size];
            if walks[i].waiter == 0 {
                walks[i].end = End::Leaf("[ready]");
                continue;
            }
            let Some(tp) = ok[k].then(|| word(b, 8)).and_then(|tp| self.names.type_name(self.it, tp)) else {
                walks[i].end = End::Unreadable;
                continue;
            };
            let w = &mut walks[i];
            w.end = if matches!(&*tp, "_asyncio.Future" | "_asyncio.Task") && b[lay.fut_state as usize] != 0 {
                End::Leaf("[ready]")
            } else if w.sleep {
                End::Leaf("[sleep]")
            } else {
                End::Awaiting(format!("[awaiting {}]", tp.strip_prefix("_asyncio.").unwrap_or(&tp)))
            };
        }
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
                let cstack = o.minor >= 12 && !self.it.u8(f + o.frame_owner).is_ok_and(owner_is_function);
                if !cstack {
                    chain.push(o.code_ptr(self.it.u64(f + o.frame_code).unwrap_or(0)));
                }
                if f == frame {
                    out.extend(chain.iter().rev().filter_map(|&c| self.names.code(self.it, c).map(|c| c.frame.clone())));
                    return true;
                }
                let Ok(prev) = self.it.u64(f + o.frame_previous) else { break };
                f = prev;
            }
        }
        false
    }
}
