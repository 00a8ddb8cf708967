//! Output ids numbered in the order of their first use, whatever the
//! input's ids: a writer of the stack table gives the same records the
//! same bytes, however the producer found them (a stream symbolized
//! again, merged again). The Writer and stackmerge's fast output both
//! number frames and stacks this way.

/// Table id -> output id, given out 0, 1, 2... as ids are first met.
#[derive(Debug, Clone, Default)]
pub struct FirstUse {
    /// Table id -> output id + 1 (0: not met yet).
    ids: Vec<u32>,
    next: u32,
}

impl FirstUse {
    /// A numbering in which table ids `0..n` were met in order.
    pub fn in_order(n: u32) -> Self {
        FirstUse { ids: (1..=n).collect(), next: n }
    }

    /// The output id of table id `id`, and whether it is met for the first time.
    pub fn number(&mut self, id: u32) -> (u32, bool) {
        let i = id as usize;
        if i >= self.ids.len() {
            self.ids.resize(i + 1, 0);
        }
        if self.ids[i] > 0 {
            return (self.ids[i] - 1, false);
        }
        self.next += 1;
        self.ids[i] = self.next;
        (self.next - 1, true)
    }

    /// Where `id`'s entry lives, for a caller that asks the memory for it
    /// ahead of its turn.
    pub fn slot(&self, id: u32) -> Option<&u32> {
        self.ids.get(id as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::FirstUse;

    #[test]
    fn numbers_by_first_use() {
        let mut f = FirstUse::default();
        assert_eq!(f.number(7), (0, true));
        assert_eq!(f.number(3), (1, true));
        assert_eq!(f.number(7), (0, false));
        assert_eq!(f.number(0), (2, true));
        let mut g = FirstUse::in_order(2);
        assert_eq!(g.number(1), (1, false));
        assert_eq!(g.number(5), (2, true));
    }
}
