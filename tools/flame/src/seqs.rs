//! The stream's stacks as sequences of frame names: each distinct name
//! (a frame's folded text, a state leaf, a process root) stored once, a
//! stack as the ids of its names. The folded text of a stack (`a;b;c`) is
//! made from it only where one is asked for ([`Seqs::text`]): 200k texts
//! of a merged stream were 200 MB, built, page-faulted in and sorted byte
//! by byte, a third of flame's run; the graph is laid out from the ids
//! ([`crate::layout_ids`]).

use std::collections::HashMap;

use wallclock_stream::fasthash::FastHash;

/// Names and stacks of names.
#[derive(Default)]
pub struct Seqs {
    names: Vec<String>,
    ids: HashMap<String, u32, FastHash>,
    /// Stack `i`'s names are `arena[ends[i]..ends[i + 1]]`.
    arena: Vec<u32>,
    ends: Vec<usize>,
}

impl Seqs {
    /// The id of `name`, stored on first sight.
    pub fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        id
    }

    pub fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// A new stack of these names; its id.
    pub fn push(&mut self, names: impl IntoIterator<Item = u32>) -> u32 {
        if self.ends.is_empty() {
            self.ends.push(0);
        }
        self.arena.extend(names);
        self.ends.push(self.arena.len());
        (self.ends.len() - 2) as u32
    }

    /// A new stack from its folded text (split at `;`, as a reader of the
    /// text would).
    pub fn push_text(&mut self, text: &str) -> u32 {
        let ids: Vec<u32> = text.split(';').map(|n| self.intern(n)).collect();
        self.push(ids)
    }

    /// How many stacks there are (ids from 0).
    pub fn len(&self) -> usize {
        self.ends.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The names of stack `id`, root first.
    pub fn seq(&self, id: u32) -> &[u32] {
        let i = id as usize;
        &self.arena[self.ends[i]..self.ends[i + 1]]
    }

    /// Asks the CPU for where stack `id`'s names lie, a few stacks before
    /// they are read (see [`wallclock_stream::table::prefetch`]).
    pub fn prefetch_place(&self, id: u32) {
        if let Some(e) = self.ends.get(id as usize) {
            wallclock_stream::table::prefetch(e);
        }
    }

    /// Asks for stack `id`'s names (its place should be cached by now).
    pub fn prefetch_names(&self, id: u32) {
        if let Some(n) = self.ends.get(id as usize).and_then(|&at| self.arena.get(at)) {
            wallclock_stream::table::prefetch(n);
        }
    }

    /// The folded text of stack `id`: its names joined by `;`.
    pub fn text(&self, id: u32) -> String {
        let seq = self.seq(id);
        let mut out = String::with_capacity(seq.iter().map(|&n| self.name(n).len() + 1).sum());
        for (i, &n) in seq.iter().enumerate() {
            if i > 0 {
                out.push(';');
            }
            out.push_str(self.name(n));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_round_trip() {
        let mut s = Seqs::default();
        for t in ["a;b;c", "a;;c", "x", "", "a;b;c"] {
            let id = s.push_text(t);
            assert_eq!(s.text(id), t);
        }
        assert_eq!(s.names().len(), 5, "a, b, c, empty, x");
        assert_eq!(s.seq(0), s.seq(4));
    }
}
