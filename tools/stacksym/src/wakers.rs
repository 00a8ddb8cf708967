//! Names for the stacks of wakers (`Stack::waker`, stream 1.3): the
//! waker's own stack, and down a chain each waker's last block and its
//! waker, named as the stack itself is, each in its own process.

use wallclock_stream::{Kind, Stack, Waker};

use crate::Engine;

fn as_stack(pid: u32, ustack: &[u64], kstack: &[u64]) -> Stack {
    let mut s = Stack::new(Kind::Off, pid, 0, "");
    s.ustack = ustack.to_vec();
    s.kstack = kstack.to_vec();
    s
}

fn gather(engine: &Engine, w: &Waker, out: &mut Vec<Stack>) {
    let s = as_stack(w.pid, &w.ustack, &w.kstack);
    if w.frames.is_empty() || engine.options().force {
        out.push(s);
    }
    if let Some(b) = &w.blocked {
        if b.frames.is_empty() || engine.options().force {
            out.push(as_stack(w.pid, &b.ustack, &b.kstack));
        }
        if let Some(next) = &b.waker {
            gather(engine, next, out);
        }
    }
}

fn fill(engine: &Engine, w: &mut Waker) {
    let force = engine.options().force;
    let strip = engine.options().strip;
    if (w.frames.is_empty() || force) && !(w.ustack.is_empty() && w.kstack.is_empty()) {
        w.frames = engine.frames(&as_stack(w.pid, &w.ustack, &w.kstack));
        if strip {
            w.ustack.clear();
            w.kstack.clear();
        }
    }
    let pid = w.pid;
    if let Some(b) = &mut w.blocked {
        if (b.frames.is_empty() || force) && !(b.ustack.is_empty() && b.kstack.is_empty()) {
            b.frames = engine.frames(&as_stack(pid, &b.ustack, &b.kstack));
            if strip {
                b.ustack.clear();
                b.kstack.clear();
            }
        }
        if let Some(next) = &mut b.waker {
            fill(engine, next);
        }
    }
}

/// Name every waker of `stacks` (their maps records already learnt).
pub fn name_wakers(engine: &mut Engine, stacks: &mut [&mut Stack]) {
    let mut todo = Vec::new();
    for s in stacks.iter() {
        if let Some(w) = &s.waker {
            gather(engine, w, &mut todo);
        }
    }
    if todo.is_empty() {
        return;
    }
    engine.prepare(todo.iter());
    for s in stacks.iter_mut() {
        if let Some(w) = &mut s.waker {
            fill(engine, w);
        }
    }
}
