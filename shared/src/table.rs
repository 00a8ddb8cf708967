//! The stack table (stream 1.3). A symbolized stream defines each distinct
//! frame once and each distinct stack once, as frame ids; its stack records
//! then carry `"stack_id"` instead of a list of frames:
//!
//! ```text
//! {"type":"frame","id":0,"frame":{"func":"main","module":"prog"}}
//! {"type":"frame","id":1,"frame":{"func":"work","module":"prog"}}
//! {"type":"stackdef","id":0,"frames":[0,1]}
//! {"type":"stack","kind":"on","pid":42,"tid":42,"stack_id":0,"ns":5000,"count":1}
//! ```
//!
//! Why: with the frames (names, modules, files) repeated in every record,
//! 1M records of 200k distinct stacks were 3 GB of JSON, and every tool
//! after `stacksym` spent its time re-reading the same strings.
//!
//! [`StackTable`] interns frames and stacks on the writing side (the
//! [`crate::Writer`] writes each definition before its first use);
//! [`Defs`] holds what a [`crate::Reader`] has read. A definition holds
//! until the same id is defined again (concatenated streams), across headers.

use std::hash::BuildHasher;

use crate::fasthash::{FastHash, FastMap};
use crate::idmap::IdMap;
use crate::record::{Frame, FrameDef, StackDef};

/// Frames and stacks interned to ids, for writing the stack table.
///
/// Every stack's frame ids lie side by side in one array, found again by
/// a hash of them: a box per stack (two, with the map's key) scattered the
/// stacks over the heap, and reading 200k of them in id order was most of
/// stackmerge's sort of the merged stacks.
#[derive(Debug, Clone)]
pub struct StackTable {
    /// Hash of a frame -> the last frame with that hash; `frame_same_hash[id]`
    /// the one before it (`u32::MAX`: none). Not a map keyed by the frame:
    /// that held every frame's strings twice, 7 MB of stacksym's peak on a
    /// system-wide capture of a build.
    frame_ids: FastMap<u64, u32>,
    frame_same_hash: Vec<u32>,
    frames: Vec<Frame>,
    /// Stack `id`'s frame ids are `arena[ends[id]..ends[id + 1]]`.
    arena: Vec<u32>,
    ends: Vec<usize>,
    /// Hash of a stack's frame ids -> the last stack with that hash;
    /// `same_hash[id]` the one before it (`u32::MAX`: none).
    by_hash: FastMap<u64, u32>,
    same_hash: Vec<u32>,
    generation: u64,
}

impl Default for StackTable {
    fn default() -> Self {
        StackTable {
            frame_ids: FastMap::default(),
            frame_same_hash: Vec::new(),
            frames: Vec::new(),
            arena: Vec::new(),
            ends: vec![0],
            by_hash: FastMap::default(),
            same_hash: Vec::new(),
            generation: 0,
        }
    }
}

impl StackTable {
    /// The id of `f`, interned on first sight.
    pub fn frame_id(&mut self, f: &Frame) -> u32 {
        let h = FastHash.hash_one(f);
        let mut at = self.frame_ids.get(&h).copied().unwrap_or(u32::MAX);
        while at != u32::MAX {
            if self.frames[at as usize] == *f {
                return at;
            }
            at = self.frame_same_hash[at as usize];
        }
        let id = self.frames.len() as u32;
        self.frames.push(f.clone());
        self.frame_same_hash.push(self.frame_ids.insert(h, id).unwrap_or(u32::MAX));
        id
    }

    /// The id of the stack of these frame ids (root first).
    pub fn stack_id(&mut self, frames: &[u32]) -> u32 {
        let h = FastHash.hash_one(frames);
        if let Some(id) = self.find_hashed(frames, h) {
            return id;
        }
        let id = self.stack_count() as u32;
        self.arena.extend_from_slice(frames);
        self.ends.push(self.arena.len());
        self.same_hash.push(self.by_hash.insert(h, id).unwrap_or(u32::MAX));
        id
    }

    /// The id of the stack of these frame ids, if interned.
    pub fn find_stack(&self, frames: &[u32]) -> Option<u32> {
        self.find_hashed(frames, FastHash.hash_one(frames))
    }

    fn find_hashed(&self, frames: &[u32], h: u64) -> Option<u32> {
        let mut at = self.by_hash.get(&h).copied().unwrap_or(u32::MAX);
        while at != u32::MAX {
            if self.stack(at) == frames {
                return Some(at);
            }
            at = self.same_hash[at as usize];
        }
        None
    }

    /// The id of the stack of these frames (each interned).
    pub fn stack_of(&mut self, frames: &[Frame]) -> u32 {
        let ids: Vec<u32> = frames.iter().map(|f| self.frame_id(f)).collect();
        self.stack_id(&ids)
    }

    /// Asks the CPU for where stack `id`'s frames are (see [`prefetch`]),
    /// a few stacks before they are read: a walk of stacks in an order
    /// other than their ids' waits on memory for each one otherwise.
    pub fn prefetch_place(&self, id: u32) {
        if let Some(e) = self.ends.get(id as usize) {
            prefetch(e);
        }
    }

    /// Asks the CPU for stack `id`'s frames (its place should be in the
    /// cache by now: [`StackTable::prefetch_place`]).
    pub fn prefetch_frames(&self, id: u32) {
        if let Some(f) = self.ends.get(id as usize).and_then(|&at| self.arena.get(at)) {
            prefetch(f);
        }
    }

    pub fn frame(&self, id: u32) -> &Frame {
        &self.frames[id as usize]
    }

    /// The frame ids of stack `id`, root first.
    pub fn stack(&self, id: u32) -> &[u32] {
        let i = id as usize;
        &self.arena[self.ends[i]..self.ends[i + 1]]
    }

    /// The frames of stack `id`, root first.
    pub fn frames_of(&self, id: u32) -> impl ExactSizeIterator<Item = &Frame> + Clone + '_ {
        self.stack(id).iter().map(|&f| self.frame(f))
    }

    pub fn stack_count(&self) -> usize {
        self.ends.len() - 1
    }

    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }

    /// Forget everything (bounds memory); ids are handed out again, so
    /// writers define them again.
    pub fn clear(&mut self) {
        *self = StackTable { generation: self.generation + 1, ..StackTable::default() };
    }

    /// Changes whenever ids may have changed meaning (see [`StackTable::clear`]).
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

/// A hint to the CPU to bring `p` into its cache.
#[inline]
pub fn prefetch<T>(p: &T) {
    // SAFETY: SSE is in every x86_64 CPU (the target's baseline), and a
    // prefetch is a hint: it neither faults nor changes memory.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const T as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The definitions a reader has read.
#[derive(Debug, Default)]
pub struct Defs {
    frames: IdMap<Frame>,
    /// Stack id -> its frame ids' place in `arena` (all side by side; a
    /// stack defined again leaves its old ids there).
    stacks: IdMap<(usize, usize)>,
    arena: Vec<u32>,
    /// A bit per stack id below [`DEFINED_BITS`] that is defined: a
    /// reader checks every record's id, and 200k entries of `stacks` do not
    /// stay in a cache (those checks were 5% of stackmerge's time).
    defined: Vec<u64>,
    /// The same for the stacks that have frames (not empty).
    named: Vec<u64>,
    generation: u64,
}

/// Stack ids below this are told defined by a bit (128 KB at most).
const DEFINED_BITS: u32 = 1 << 20;

impl Defs {
    pub fn define_frame(&mut self, d: FrameDef) {
        if self.frames.insert(d.id, d.frame).is_some() {
            self.generation += 1;
        }
    }

    /// A stack may only name frames defined before it.
    pub fn define_stack(&mut self, d: StackDef) -> Result<(), String> {
        if let Some(f) = d.frames.iter().find(|&&f| !self.frames.contains(f)) {
            return Err(format!("stackdef {} names frame {f}, which no frame record defined before it", d.id));
        }
        if d.id < DEFINED_BITS {
            let word = (d.id / 64) as usize;
            if word >= self.defined.len() {
                self.defined.resize(word + 1, 0);
                self.named.resize(word + 1, 0);
            }
            let bit = 1 << (d.id % 64);
            self.defined[word] |= bit;
            // A stack defined again may have lost its frames.
            self.named[word] = (self.named[word] & !bit) | if d.frames.is_empty() { 0 } else { bit };
        }
        let start = self.arena.len();
        self.arena.extend_from_slice(&d.frames);
        if self.stacks.insert(d.id, (start, self.arena.len())).is_some() {
            self.generation += 1;
        }
        Ok(())
    }

    /// The frame ids of stack `id`, root first.
    pub fn stack(&self, id: u32) -> Option<&[u32]> {
        self.stacks.get(id).map(|&(a, b)| &self.arena[a..b])
    }

    pub fn frame(&self, id: u32) -> Option<&Frame> {
        self.frames.get(id)
    }

    /// Is stack `id` defined? (What [`Defs::stack`] says, faster.)
    pub fn has_stack(&self, id: u32) -> bool {
        if id < DEFINED_BITS {
            return self.defined.get((id / 64) as usize).is_some_and(|w| w & (1 << (id % 64)) != 0);
        }
        self.stacks.contains(id)
    }

    /// Is stack `id` defined with at least one frame? (What
    /// [`Defs::stack`] says, from a bit: asked for every record.)
    pub fn has_frames(&self, id: u32) -> bool {
        if id < DEFINED_BITS {
            return self.named.get((id / 64) as usize).is_some_and(|w| w & (1 << (id % 64)) != 0);
        }
        self.stack(id).is_some_and(|f| !f.is_empty())
    }

    /// The frames of stack `id`, root first.
    pub fn frames(&self, id: u32) -> Option<Vec<Frame>> {
        let ids = self.stack(id)?;
        ids.iter().map(|f| self.frame(*f).cloned()).collect()
    }

    /// Changes whenever an id is defined again: what was learnt from the
    /// old definitions (by id) no longer holds.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interned_once_and_cleared() {
        let mut t = StackTable::default();
        let a = t.stack_of(&[Frame::named("main"), Frame::kernel("read")]);
        let b = t.stack_of(&[Frame::named("main")]);
        assert_eq!(t.stack_of(&[Frame::named("main"), Frame::kernel("read")]), a);
        assert_ne!(a, b);
        assert_eq!(t.frame_count(), 2);
        assert_eq!((t.find_stack(&[0, 1]), t.find_stack(&[1])), (Some(a), None));
        assert_eq!(t.frames_of(a).map(|f| f.func.as_str()).collect::<Vec<_>>(), ["main", "read"]);
        let g = t.generation();
        t.clear();
        assert_ne!(t.generation(), g);
        assert_eq!(t.stack_count(), 0);
    }

    #[test]
    fn undefined_frame_rejected_redefinition_counted() {
        let mut d = Defs::default();
        let e = d.define_stack(StackDef { id: 0, frames: vec![3] }).unwrap_err();
        assert!(e.contains("frame 3"), "{e}");
        d.define_frame(FrameDef { id: 3, frame: Frame::named("a") });
        assert!(!d.has_stack(0), "a refused stackdef defines nothing");
        d.define_stack(StackDef { id: 0, frames: vec![3] }).unwrap();
        d.define_stack(StackDef { id: 4_000_000_000, frames: vec![3] }).unwrap();
        assert!(d.has_stack(0) && d.has_stack(4_000_000_000) && !d.has_stack(1) && !d.has_stack(999_999));
        assert!(d.has_frames(0) && d.has_frames(4_000_000_000) && !d.has_frames(1));
        let g = d.generation();
        d.define_frame(FrameDef { id: 3, frame: Frame::named("b") });
        assert_ne!(d.generation(), g);
        assert_eq!(d.frames(0).unwrap(), [Frame::named("b")]);
        d.define_stack(StackDef { id: 0, frames: vec![] }).unwrap();
        assert!(d.has_stack(0) && !d.has_frames(0), "defined again, empty");
    }
}
