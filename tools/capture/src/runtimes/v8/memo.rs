//! The last stack named in a process, for the next: a frame with the
//! same return address, frame pointer and function and bytecode slots as
//! the last stack's, under frames that are all the same too, is named as
//! it was, without reading the heap again. Such a frame is the same
//! activation (a GC that moves its function rewrites the slot), or a call
//! again from the same caller to the function at the same address: the
//! same function, unless a GC put another there in between; the memo is
//! dropped every `TURNS` turns (200 ms), so that such a frame is read
//! again within that. The frames of node's module loader under the
//! program's (eight JavaScript frames in Node 22 and 24, six in 20, each
//! a few reads of the heap a turn) are read once that often, not at each
//! stack: the reader's cost per stack no longer grows with them.
//!
//! The first frame that differs is kept too where only its address
//! does, both in JIT code: the same frame pointer, function and bytecode
//! slots, so the same activation of the same function, sampled at
//! another instruction (a loop on the CPU: Node 24's `crunch` leaf, at
//! six addresses, had its function read again at 219 of 308 stacks,
//! each time a turn began, four reads of the heap; Node 20's was sampled
//! at one address and hit the memo).

/// Turns a memo is used for.
pub const TURNS: u64 = 10;
/// A frame that is no JavaScript frame.
pub const SKIPPED: u64 = 0;
/// A JavaScript frame whose function was not read.
pub const UNREAD: u64 = 1;

/// A frame: return address, frame pointer, function slot, bytecode slot
/// (the slots' words in the stack's copy, 0 where outside it).
pub type Key = (u64, u64, u64, u64);

#[derive(Default)]
pub struct Memo {
    /// `ts / (TURNS * TURN_NS)` of the stack.
    pub group: u64,
    /// Its frames, root first.
    pub keys: Vec<Key>,
    /// What each frame was named: its address, `SKIPPED` or `UNREAD`.
    pub out: Vec<u64>,
}

impl Memo {
    /// How many frames of `keys`, from the root, are the memo's: the
    /// same, then one more whose address alone differs, both addresses
    /// in JIT code (`jit`), where the memo named it.
    pub fn same(&self, group: u64, keys: &[Key], jit: impl Fn(u64) -> bool) -> usize {
        if group != self.group {
            return 0;
        }
        let n = keys.iter().zip(&self.keys).take_while(|(a, b)| a == b).count();
        let moved = |(a, fp, f, b): Key, (a2, fp2, f2, b2): Key| fp != 0 && (fp, f, b) == (fp2, f2, b2) && jit(a) && jit(a2);
        match (keys.get(n), self.keys.get(n), self.out.get(n)) {
            (Some(&k), Some(&m), Some(&o)) if o > UNREAD && moved(k, m) => n + 1,
            _ => n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frames_from_the_root_that_are_the_same() {
        let m = Memo { group: 3, keys: vec![(1, 10, 5, 0), (2, 9, 6, 0), (3, 8, 7, 0)], out: vec![0, 7, 1] };
        let none = |_| false;
        assert_eq!(m.same(3, &[(1, 10, 5, 0), (2, 9, 6, 0), (4, 8, 7, 0)], none), 2);
        assert_eq!(m.same(3, &[(1, 10, 5, 0), (2, 9, 9, 0)], none), 1);
        assert_eq!(m.same(3, &[(1, 10, 5, 0), (2, 9, 6, 0), (3, 8, 7, 0), (5, 7, 0, 0)], none), 3);
        assert_eq!(m.same(4, &[(1, 10, 5, 0)], none), 0);
    }

    #[test]
    fn a_jit_frame_sampled_at_another_address_is_the_same() {
        // Addresses from 1000 are JIT code.
        let jit = |a: u64| a >= 1000;
        let m = Memo { group: 3, keys: vec![(1, 10, 5, 0), (1000, 9, 6, 0)], out: vec![0, 7] };
        assert_eq!(m.same(3, &[(1, 10, 5, 0), (1010, 9, 6, 0)], jit), 2);
        // Another frame pointer, function or bytecode slot: read again.
        assert_eq!(m.same(3, &[(1, 10, 5, 0), (1010, 8, 6, 0)], jit), 1);
        assert_eq!(m.same(3, &[(1, 10, 5, 0), (1010, 9, 4, 0)], jit), 1);
        assert_eq!(m.same(3, &[(1, 10, 5, 0), (1010, 9, 6, 3)], jit), 1);
        // Out of JIT code (a trampoline's or a C++ frame): read again.
        assert_eq!(m.same(3, &[(1, 10, 5, 0), (2, 9, 6, 0)], jit), 1);
        // Not named by the memo (no JavaScript, or not read): read again.
        let unread = Memo { out: vec![0, UNREAD], ..m };
        assert_eq!(unread.same(3, &[(1, 10, 5, 0), (1010, 9, 6, 0)], jit), 1);
    }
}
