//! A map from the stream's own ids (frame and stack ids of the stack
//! table) to values: a vector indexed by the id while ids stay dense, as
//! every writer of ours numbers them from 0, and a hash map for ids far
//! past them (hand-made or hostile input must not make the vector huge).
//! Looking up 200k stack ids in a hash map per record was a tenth of
//! stackmerge's time on 1M records.

use crate::fasthash::FastMap;

/// Ids up to this far past the dense part's length go in the vector.
const SLACK: usize = 1 << 16;

#[derive(Debug, Clone)]
pub struct IdMap<V> {
    dense: Vec<Option<V>>,
    sparse: FastMap<u32, V>,
}

impl<V> Default for IdMap<V> {
    fn default() -> Self {
        IdMap { dense: Vec::new(), sparse: FastMap::default() }
    }
}

impl<V> IdMap<V> {
    pub fn get(&self, id: u32) -> Option<&V> {
        match self.dense.get(id as usize) {
            Some(v) => v.as_ref(),
            None => self.sparse.get(&id),
        }
    }

    pub fn get_mut(&mut self, id: u32) -> Option<&mut V> {
        match self.dense.get_mut(id as usize) {
            Some(v) => v.as_mut(),
            None => self.sparse.get_mut(&id),
        }
    }

    pub fn contains(&self, id: u32) -> bool {
        self.get(id).is_some()
    }

    /// Set `id` to `v`; the value it had, if any.
    pub fn insert(&mut self, id: u32, v: V) -> Option<V> {
        let i = id as usize;
        if i >= self.dense.len() && i < 2 * self.dense.len() + SLACK {
            self.dense.resize_with(i + 1, || None);
            // Ids now in the dense part's range move there.
            if !self.sparse.is_empty() {
                let moved: Vec<u32> = self.sparse.keys().copied().filter(|&k| (k as usize) <= i).collect();
                for k in moved {
                    self.dense[k as usize] = self.sparse.remove(&k);
                }
            }
        }
        match self.dense.get_mut(i) {
            Some(slot) => slot.replace(v),
            None => self.sparse.insert(id, v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_and_sparse_ids() {
        let mut m = IdMap::default();
        assert_eq!(m.insert(0, "a"), None);
        assert_eq!(m.insert(4_000_000_000, "far"), None);
        assert_eq!(m.insert(3, "b"), None);
        assert_eq!(m.insert(3, "c"), Some("b"));
        assert_eq!((m.get(0), m.get(1), m.get(3)), (Some(&"a"), None, Some(&"c")));
        assert_eq!(m.get(4_000_000_000), Some(&"far"));
        assert!(m.dense.len() < 100, "a far id stays out of the vector");
        // A sparse id that the dense part grows past moves into it.
        m.insert(70_000, "x");
        m.insert(100_000, "y");
        assert_eq!((m.get(70_000), m.get(100_000)), (Some(&"x"), Some(&"y")));
        assert!(m.contains(100_000) && !m.contains(99_999));
        *m.get_mut(100_000).unwrap() = "z";
        *m.get_mut(4_000_000_000).unwrap() = "farther";
        assert_eq!((m.get(100_000), m.get(4_000_000_000)), (Some(&"z"), Some(&"farther")));
        assert_eq!(m.get_mut(5), None);
    }
}
