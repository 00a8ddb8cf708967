//! Stacks met before: one hash of a stack's addresses instead of a lookup
//! per address (on 1M records of 200k stacks, the per-address lookups
//! were a third of stacksym's time, measured with oncputime). Kept with
//! the addresses of the stack's process (crate::engine::cache), and dropped with
//! them.
//!
//! Kept compact ([`crate::knownstacks`]) and looked up a group of records
//! at a time ([`Engine::known_ids`]).

use wallclock_stream::{Record, Stack};

use crate::engine::{space_pid, Engine, Space};
use crate::knownstacks::{Key, KnownStacks};

/// How many records ahead of its lookup a record's slot is fetched; its
/// stack is fetched half as far ahead, once its slot is in.
const AHEAD: usize = 16;

impl Engine {
    /// [`Engine::symbolized_known`] of each record of `records` that is a
    /// stack needing names (`None` for the others), the memory of each
    /// lookup fetched ahead of it: one record after the other, each
    /// waited for its two cache misses (the slot, the stack) in turn.
    pub fn known_ids(&mut self, records: &[Record]) -> Vec<Option<u32>> {
        let force = self.opts.force;
        let stacks = || {
            records.iter().enumerate().filter_map(move |(i, r)| match r {
                Record::Stack(s) if crate::engine::needs(s, force) => Some((i, s)),
                _ => None,
            })
        };
        // Their processes still in use: not to be dropped (crate::engine::cache).
        let mut last = None;
        let used: Vec<u32> = stacks().map(|(_, s)| space_pid(s)).filter(|&p| last.replace(p) != Some(p)).collect();
        for pid in used {
            if let Some(c) = self.spaces.get_mut(&pid) {
                c.used = self.generation;
            }
        }
        // Each stack with its process's table (found again only when the
        // process changes from one record to the next).
        let mut last: Option<(u32, Option<&KnownStacks>)> = None;
        let mut todo: Vec<(&Stack, usize, Key, &KnownStacks)> = Vec::with_capacity(records.len());
        for (i, s) in stacks() {
            let known = match last {
                Some((pid, k)) if pid == space_pid(s) => k,
                _ => self.spaces.get(&space_pid(s)).map(|c| &c.known),
            };
            last = Some((space_pid(s), known));
            if let (Some(k), Some(key)) = (known, Key::of(s)) {
                todo.push((s, i, key, k));
            }
        }
        let mut found = Vec::with_capacity(todo.len());
        for &(_, _, key, k) in todo.iter().take(AHEAD) {
            k.prefetch_slot(key);
        }
        for (j, &(s, i, key, k)) in todo.iter().enumerate() {
            if let Some(&(_, _, key, k)) = todo.get(j + AHEAD) {
                k.prefetch_slot(key);
            }
            if let Some(&(_, _, key, k)) = todo.get(j + AHEAD / 2) {
                k.prefetch_stack(key);
            }
            if let Some((id, unnamed)) = k.get(key, s) {
                crate::unnamed::add_time(&mut self.unnamed_time, unnamed, s);
                found.push((s, i, id));
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
        let Some(c) = self.spaces.get(&space_pid(s)) else { return false };
        Key::of(s).is_some_and(|key| c.known.get(key, s).is_some())
    }

    /// The table id of the stack of `s`'s frames when `s` was met before
    /// (one lookup), its time counted under the modules it has unnamed
    /// frames in.
    pub fn symbolized_known(&mut self, s: &Stack) -> Option<u32> {
        let generation = self.generation;
        let c = self.spaces.get_mut(&space_pid(s))?;
        // Still in use: not to be dropped (crate::engine::cache).
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
            self.space_mut(Space::User(space_pid(s))).known.insert(key, s, id, &unnamed);
        }
        id
    }
}
