//! Stacks met before: one hash of a stack's addresses instead of a lookup
//! per address (on 1M records of 200k stacks, the per-address lookups
//! were a third of stacksym's time, measured with oncputime). Kept with
//! the addresses of the stack's process (crate::cache), and dropped with
//! them.
//!
//! Kept compact ([`crate::knownstacks`]) and looked up a group of records
//! at a time ([`Engine::known_ids`]).

use wallclock_stream::{Record, Stack};

use crate::engine::{Engine, Space};
use crate::knownstacks::Key;

/// How many records ahead of its lookup a record's slot is fetched; its
/// stack is fetched half as far ahead, once its slot is in.
const AHEAD: usize = 16;

impl Engine {
    /// [`Engine::symbolized_known`] of each record of `records` that is a
    /// stack needing names (`None` for the others), the memory of each
    /// lookup fetched ahead of it: one record after the other, each
    /// waited for its two cache misses (the slot, the stack) in turn.
    pub fn known_ids(&mut self, records: &[Record]) -> Vec<Option<u32>> {
        let generation = self.generation;
        let mut todo: Vec<(&Stack, usize, Key)> = Vec::with_capacity(records.len());
        for (i, r) in records.iter().enumerate() {
            let Record::Stack(s) = r else { continue };
            if !self.needs(s) {
                continue;
            }
            let Some(c) = self.spaces.get_mut(&s.pid) else { continue };
            // Still in use: not to be dropped (crate::cache).
            c.used = generation;
            if let Some(key) = Key::of(s) {
                todo.push((s, i, key));
            }
        }
        let known = |(s, _, _): &(&Stack, usize, Key)| &self.spaces[&s.pid].known;
        let mut found = Vec::with_capacity(todo.len());
        for t in todo.iter().take(AHEAD) {
            known(t).prefetch_slot(t.2);
        }
        for (j, t) in todo.iter().enumerate() {
            if let Some(ahead) = todo.get(j + AHEAD) {
                known(ahead).prefetch_slot(ahead.2);
            }
            if let Some(ahead) = todo.get(j + AHEAD / 2) {
                known(ahead).prefetch_stack(ahead.2);
            }
            if let Some((id, unnamed)) = known(t).get(t.2, t.0) {
                crate::unnamed::add_time(&mut self.unnamed_time, unnamed, t.0);
                found.push((t.0, t.1, id));
            }
        }
        let mut ids = vec![None; records.len()];
        for (s, i, id) in found {
            self.note_cut(s, id);
            ids[i] = Some(id);
        }
        ids
    }

    /// Whether `s` was met before.
    pub(crate) fn known(&self, s: &Stack) -> bool {
        let Some(c) = self.spaces.get(&s.pid) else { return false };
        Key::of(s).is_some_and(|key| c.known.get(key, s).is_some())
    }

    /// The table id of the stack of `s`'s frames when `s` was met before
    /// (one lookup), its time counted under the modules it has unnamed
    /// frames in.
    pub fn symbolized_known(&mut self, s: &Stack) -> Option<u32> {
        let generation = self.generation;
        let c = self.spaces.get_mut(&s.pid)?;
        // Still in use: not to be dropped (crate::cache).
        c.used = generation;
        let (id, unnamed) = c.known.get(Key::of(s)?, s)?;
        crate::unnamed::add_time(&mut self.unnamed_time, unnamed, s);
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
        self.note_cut(s, id);
        if let Some(key) = Key::of(s) {
            self.space_mut(Space::User(s.pid)).known.insert(key, s, id, &unnamed);
        }
        id
    }
}
