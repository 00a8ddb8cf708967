//! Stacks met before: one hash of a stack's addresses instead of a lookup
//! per address (on 1M records of 200k stacks, the per-address lookups
//! were a third of stacksym's time, measured with oncputime). Kept with
//! the addresses of the stack's process (crate::cache), and dropped with
//! them.

use std::hash::BuildHasher;

use wallclock_stream::fasthash::FastHash;
use wallclock_stream::Stack;

use crate::engine::{Engine, Space};
use crate::gil;

/// A stack written before.
pub(crate) struct Known {
    /// `ustack.len()`, `ustack`, `kstack`: to tell a hash collision.
    addrs: Box<[u64]>,
    pid: u32,
    /// Whether it may wait for the GIL ([`gil::blocked`]).
    blocked: bool,
    /// Its id in the engine's table.
    id: u32,
    /// The modules it has unnamed frames in (`Engine::modules`).
    unnamed: Box<[u32]>,
}

impl Known {
    fn is(&self, s: &Stack) -> bool {
        let n = s.ustack.len();
        self.pid == s.pid
            && self.blocked == gil::blocked(s)
            && self.addrs.len() == 1 + n + s.kstack.len()
            && self.addrs[0] == n as u64
            && self.addrs[1..1 + n] == s.ustack[..]
            && self.addrs[1 + n..] == s.kstack[..]
    }
}

/// What the frames of a stack depend on: its addresses, its pid, and
/// whether it is blocked (the `[GIL]` frame).
fn hash(s: &Stack) -> u64 {
    FastHash.hash_one((s.pid, gil::blocked(s), &s.ustack, &s.kstack))
}

impl Engine {
    pub(crate) fn known(&self, s: &Stack) -> Option<&Known> {
        self.spaces.get(&s.pid)?.known.get(&hash(s)).filter(|k| k.is(s))
    }

    /// The table id of the stack of `s`'s frames when `s` was met before
    /// (one lookup), its time counted under the modules it has unnamed
    /// frames in.
    pub fn symbolized_known(&mut self, s: &Stack) -> Option<u32> {
        let generation = self.generation;
        let c = self.spaces.get_mut(&s.pid)?;
        // Still in use: not to be dropped (crate::cache).
        c.used = generation;
        let k = c.known.get(&hash(s)).filter(|k| k.is(s))?;
        crate::unnamed::add_time(&mut self.unnamed_time, &k.unnamed, s);
        let id = k.id;
        self.note_cut(s, id);
        Some(id)
    }

    /// The table id of the stack of `s`'s frames, its time counted under
    /// the modules it has unnamed frames in. Call after [`Engine::prepare`]
    /// saw `s`.
    pub fn symbolized(&mut self, s: &Stack) -> u32 {
        if let Some(id) = self.symbolized_known(s) {
            return id;
        }
        let id = self.stack_id(s);
        let unnamed = self.unnamed_modules(s);
        self.add_unnamed_time(&unnamed, s);
        let mut addrs = Vec::with_capacity(1 + s.ustack.len() + s.kstack.len());
        addrs.push(s.ustack.len() as u64);
        addrs.extend_from_slice(&s.ustack);
        addrs.extend_from_slice(&s.kstack);
        let known = Known { addrs: addrs.into(), pid: s.pid, blocked: gil::blocked(s), id, unnamed };
        self.space_mut(Space::User(s.pid)).known.insert(hash(s), known);
        self.note_cut(s, id);
        id
    }
}
