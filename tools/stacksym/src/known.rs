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

/// Records looked up together by [`Engine::known_ids`].
const GROUP: usize = 16;

impl Engine {
    /// [`Engine::symbolized_known`] of each record of `records` that is a
    /// stack needing names (`None` for the others), a group of records
    /// at a time, each step's memory fetched for the whole group before
    /// it is read: one record after the other, each waited for its two
    /// cache misses (the slot, the stack) in turn.
    pub fn known_ids(&mut self, records: &[Record]) -> Vec<Option<u32>> {
        let mut ids = vec![None; records.len()];
        let generation = self.generation;
        let mut todo: Vec<(&Stack, usize, Key)> = Vec::with_capacity(GROUP);
        for (g, group) in records.chunks(GROUP).enumerate() {
            todo.clear();
            for (j, r) in group.iter().enumerate() {
                let Record::Stack(s) = r else { continue };
                if !self.needs(s) {
                    continue;
                }
                let Some(c) = self.spaces.get_mut(&s.pid) else { continue };
                // Still in use: not to be dropped (crate::cache).
                c.used = generation;
                let Some(key) = Key::of(s) else { continue };
                c.known.prefetch_slot(key);
                todo.push((s, g * GROUP + j, key));
            }
            for &(s, _, key) in &todo {
                self.spaces[&s.pid].known.prefetch_stack(key);
            }
            for &(s, i, key) in &todo {
                let Some((id, unnamed)) = self.spaces[&s.pid].known.get(key, s) else { continue };
                crate::unnamed::add_time(&mut self.unnamed_time, unnamed, s);
                self.note_cut(s, id);
                ids[i] = Some(id);
            }
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
