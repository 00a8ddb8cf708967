//! The stacks of one address space met before ([`crate::known`]), kept
//! compact as they are looked up once per record: a table of 8-byte
//! slots (open addressing) pointing into one vector that holds each
//! stack's id and addresses one after the other. As a hash map of boxed
//! address lists they took 230 bytes a stack and three cache misses a
//! lookup (the map's control bytes, its entry, the box): the most costly
//! step of stacksym's run on 1M records of 200k stacks.

use std::hash::Hasher;

use wallclock_stream::fasthash::FxHasher;
use wallclock_stream::Stack;

use crate::gil;

#[derive(Default)]
pub(crate) struct KnownStacks {
    /// A power of two many, at most 3/4 of them used (none at first).
    slots: Vec<Slot>,
    /// `64 - log2(slots.len())`: a hash's slot is its top bits.
    shift: u32,
    used: usize,
    /// Each stack's [`Head`], `ustack`, `kstack`, then (where it has
    /// unnamed frames) how many modules it has them in and which.
    words: Vec<u64>,
}

/// One stack met before; `tag == 0`: an empty slot.
#[derive(Clone, Copy, Default)]
struct Slot {
    /// Low bits of its hash, never 0: most other stacks differ here.
    tag: u32,
    /// Where it starts in [`KnownStacks::words`].
    at: u32,
}

/// The first word of a stack in [`KnownStacks::words`]: its shape (see
/// [`Key`]) and its id in the engine's table.
#[derive(Clone, Copy)]
struct Head {
    shape: u32,
    id: u32,
}

/// Longest `ustack` or `kstack` remembered (longer ones are named again
/// each time: capture tools stop at 127 frames).
const MAX_LEN: usize = (1 << 14) - 1;
const BLOCKED: u32 = 1 << 28;
const UNNAMED: u32 = 1 << 29;

impl Head {
    fn word(self) -> u64 {
        u64::from(self.shape) | u64::from(self.id) << 32
    }

    fn of(word: u64) -> Head {
        Head { shape: word as u32, id: (word >> 32) as u32 }
    }

    fn lens(self) -> (usize, usize) {
        ((self.shape & MAX_LEN as u32) as usize, (self.shape >> 14 & MAX_LEN as u32) as usize)
    }

    /// Its length in [`KnownStacks::words`], given the word after its
    /// addresses.
    fn len(self, next: impl FnOnce() -> u64) -> usize {
        let (u, k) = self.lens();
        1 + u + k + if self.shape & UNNAMED != 0 { 1 + next() as usize } else { 0 }
    }
}

/// What a stack is looked up by: the hash of what its frames depend on
/// (besides its process, whose table it is in): its addresses, and
/// whether it is blocked ([`gil::blocked`]: the `[GIL]` frame); and its
/// shape: the lengths of `ustack` and `kstack` and that flag.
#[derive(Clone, Copy)]
pub(crate) struct Key {
    hash: u64,
    shape: u32,
}

impl Key {
    /// `None` for a stack too long to be remembered.
    pub(crate) fn of(s: &Stack) -> Option<Key> {
        let (u, k) = (s.ustack.len(), s.kstack.len());
        let shape = (u <= MAX_LEN && k <= MAX_LEN)
            .then(|| u as u32 | (k as u32) << 14 | if gil::blocked(s) { BLOCKED } else { 0 })?;
        Some(Key { hash: hash(&s.ustack, &s.kstack, shape), shape })
    }

    fn tag(self) -> u32 {
        self.hash as u32 | 1
    }
}

fn hash(ustack: &[u64], kstack: &[u64], shape: u32) -> u64 {
    let mut h = FxHasher::default();
    h.write_u32(shape & !UNNAMED);
    for &a in ustack.iter().chain(kstack) {
        h.write_u64(a);
    }
    h.finish()
}

/// Whether two address lists are the same (a call to memcmp for 20
/// addresses cost more than the compare).
fn same(a: &[u64], b: &[u64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// Fetch the cache line of `p` ahead of its use.
#[inline]
fn prefetch<T>(p: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint that reads nothing and cannot fault.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((p as *const T).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

impl KnownStacks {
    /// The table id of `s` (of key `key`) and the modules it has unnamed
    /// frames in, if it is known.
    pub(crate) fn get(&self, key: Key, s: &Stack) -> Option<(u32, impl Iterator<Item = u32> + '_)> {
        let slot = self.slots[self.probe(key, s).ok()?];
        let head = Head::of(self.words[slot.at as usize]);
        let (u, k) = head.lens();
        let at = slot.at as usize + 1 + u + k;
        let unnamed = match head.shape & UNNAMED {
            0 => &[][..],
            _ => &self.words[at + 1..at + 1 + self.words[at] as usize],
        };
        Some((head.id, unnamed.iter().map(|&m| m as u32)))
    }

    /// Fetch the slot of `key` ahead of [`KnownStacks::get`].
    pub(crate) fn prefetch_slot(&self, key: Key) {
        if let Some(slot) = self.slots.get(self.first(key)) {
            prefetch(slot);
        }
    }

    /// Fetch the stack the slot of `key` points to ahead of
    /// [`KnownStacks::get`] (after [`KnownStacks::prefetch_slot`]).
    pub(crate) fn prefetch_stack(&self, key: Key) {
        let Some(&slot) = self.slots.get(self.first(key)).filter(|s| s.tag == key.tag()) else { return };
        let (u, k) = Head { shape: key.shape, id: 0 }.lens();
        for w in self.words[slot.at as usize..].iter().take(1 + u + k).step_by(8) {
            prefetch(w);
        }
    }

    /// Remember `s` (of key `key`) as stack `id` of the engine's table,
    /// with frames unnamed in `unnamed` (module ids). Past 4G words
    /// (never met: the caches are emptied long before), not remembered.
    pub(crate) fn insert(&mut self, key: Key, s: &Stack, id: u32, unnamed: &[u32]) {
        let Ok(at) = u32::try_from(self.words.len()) else { return };
        self.reserve();
        let Err(i) = self.probe(key, s) else { return };
        let flag = if unnamed.is_empty() { 0 } else { UNNAMED };
        self.words.push(Head { shape: key.shape | flag, id }.word());
        self.words.extend_from_slice(&s.ustack);
        self.words.extend_from_slice(&s.kstack);
        if !unnamed.is_empty() {
            self.words.push(unnamed.len() as u64);
            self.words.extend(unnamed.iter().map(|&m| u64::from(m)));
        }
        self.slots[i] = Slot { tag: key.tag(), at };
        self.used += 1;
    }

    fn first(&self, key: Key) -> usize {
        if self.slots.is_empty() {
            usize::MAX
        } else {
            (key.hash >> self.shift) as usize
        }
    }

    /// The slot of `s`: `Ok` where it is, `Err` the empty slot where it
    /// would go (`Err(usize::MAX)` while there are no slots).
    fn probe(&self, key: Key, s: &Stack) -> Result<usize, usize> {
        let mask = self.slots.len().wrapping_sub(1);
        let mut i = self.first(key);
        loop {
            let Some(&slot) = self.slots.get(i) else { return Err(i) };
            if slot.tag == 0 {
                return Err(i);
            }
            let at = slot.at as usize;
            if slot.tag == key.tag() && Head::of(self.words[at]).shape & !UNNAMED == key.shape {
                let (u, k) = Head::of(self.words[at]).lens();
                if same(&self.words[at + 1..at + 1 + u], &s.ustack) && same(&self.words[at + 1 + u..at + 1 + u + k], &s.kstack) {
                    return Ok(i);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Room for one more stack: slots doubled past 3/4 used, placed again
    /// by reading the stacks in the order they were added.
    fn reserve(&mut self) {
        if (self.used + 1) * 4 <= self.slots.len() * 3 {
            return;
        }
        let n = (self.slots.len() * 2).max(8);
        self.slots = vec![Slot::default(); n];
        self.shift = 64 - n.trailing_zeros();
        let mut at = 0;
        while at < self.words.len() {
            let head = Head::of(self.words[at]);
            let (u, k) = head.lens();
            let key = Key { hash: hash(&self.words[at + 1..at + 1 + u], &self.words[at + 1 + u..at + 1 + u + k], head.shape), shape: head.shape };
            let mut i = self.first(key);
            while self.slots[i].tag != 0 {
                i = (i + 1) & (n - 1);
            }
            self.slots[i] = Slot { tag: key.tag(), at: at as u32 };
            at += head.len(|| self.words[at + 1 + u + k]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wallclock_stream::{Kind, State};

    fn stack(n: u64, blocked: bool) -> Stack {
        let mut s = Stack::new(Kind::Off, 1, 1, "");
        s.state = Some(if blocked { State::S } else { State::R });
        s.ustack = (0..1 + n % 7).map(|i| 0x5000 + n * 16 + i).collect();
        s.kstack = (0..n % 3).map(|i| u64::MAX - i - n).collect();
        s
    }

    /// Every stack remembered is found with its id and unnamed modules,
    /// across the table's growth; a stack that differs only in being
    /// blocked, or in where user addresses end and kernel ones begin, is
    /// another.
    #[test]
    fn found_as_remembered() {
        let mut k = KnownStacks::default();
        let unnamed = |n: u64| (0..n % 4).map(|m| m as u32 * 7).collect::<Vec<u32>>();
        for n in 0..5000u64 {
            let s = stack(n, n % 2 == 0);
            let key = Key::of(&s).unwrap();
            assert!(k.get(key, &s).is_none(), "{n}");
            k.insert(key, &s, n as u32, &unnamed(n));
        }
        for n in 0..5000u64 {
            for blocked in [false, true] {
                let s = stack(n, blocked);
                let key = Key::of(&s).unwrap();
                k.prefetch_slot(key);
                k.prefetch_stack(key);
                let got = k.get(key, &s).map(|(id, m)| (id, m.collect::<Vec<u32>>()));
                let want = (blocked == (n % 2 == 0)).then(|| (n as u32, unnamed(n)));
                assert_eq!(got, want, "{n} {blocked}");
            }
        }
        let mut moved = stack(12, true);
        moved.kstack.insert(0, moved.ustack.pop().unwrap());
        assert!(k.get(Key::of(&moved).unwrap(), &moved).is_none());
        let mut long = Stack::new(Kind::On, 1, 1, "");
        long.ustack = vec![1; MAX_LEN + 1];
        assert!(Key::of(&long).is_none());
    }
}
