//! The stream's stacks aggregated: (tid, pid, stack of names) -> time by
//! kind. A merged stream brings each stack once or a few times, nearly
//! always from one process (and one thread, split per thread): each stack
//! of names keeps its first (tid, pid) in a vector indexed by its id, and
//! only the others go in a map. A hash map entry inserted for each of
//! 200k stacks was a fifth of flame's reading of a merged stream.

use std::collections::HashMap;

use wallclock_stream::fasthash::FastHash;

use crate::kinds::Mix;

#[derive(Default)]
pub struct StreamStacks {
    /// Stack of names `seq` -> its first (tid, pid) and their time.
    first: Vec<Option<(u32, u32, Mix)>>,
    /// (tid, pid, seq) of the others.
    more: HashMap<(u32, u32, u32), Mix, FastHash>,
    any: bool,
}

impl StreamStacks {
    /// Add `ns` of kind index `kind` to (tid, pid, seq).
    pub fn add(&mut self, tid: u32, pid: u32, seq: u32, kind: usize, ns: u64) {
        self.any = true;
        let i = seq as usize;
        if i >= self.first.len() {
            self.first.resize(i + 1, None);
        }
        match &mut self.first[i] {
            Some((t, p, mix)) if (*t, *p) == (tid, pid) => mix[kind] += ns,
            Some(_) => self.more.entry((tid, pid, seq)).or_default()[kind] += ns,
            slot @ None => {
                let mut mix = Mix::default();
                mix[kind] = ns;
                *slot = Some((tid, pid, mix));
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        !self.any
    }

    /// Every ((tid, pid, seq), time by kind).
    pub fn iter(&self) -> impl Iterator<Item = ((u32, u32, u32), Mix)> + '_ {
        let first = self.first.iter().enumerate().filter_map(|(seq, e)| e.map(|(t, p, mix)| ((t, p, seq as u32), mix)));
        first.chain(self.more.iter().map(|(&k, &mix)| (k, mix)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_thread_in_the_vector_others_in_the_map() {
        let mut s = StreamStacks::default();
        assert!(s.is_empty());
        s.add(0, 7, 3, 1, 10);
        s.add(0, 7, 3, 0, 5);
        s.add(0, 8, 3, 1, 2);
        s.add(0, 7, 0, 1, 1);
        let mut all: Vec<_> = s.iter().collect();
        all.sort();
        assert_eq!(all, [((0, 7, 0), [0, 1, 0, 0]), ((0, 7, 3), [5, 10, 0, 0]), ((0, 8, 3), [0, 2, 0, 0])]);
    }
}
