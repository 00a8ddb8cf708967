//! The one fast hash map of the workspace: rustc's Fx hash (a rotate,
//! xor and multiply per 8 bytes), where SipHash was a tenth of the run time
//! on 1M folded lines. Keys are our own stacks, not input an attacker
//! chooses to collide.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// A `HashMap` with [`FxHasher`].
pub type FastMap<K, V> = HashMap<K, V, FastHash>;

/// Builds [`FxHasher`]s.
#[derive(Debug, Default, Clone, Copy)]
pub struct FastHash;

impl BuildHasher for FastHash {
    type Hasher = FxHasher;
    fn build_hasher(&self) -> FxHasher {
        FxHasher(0)
    }
}

/// rustc's FxHasher.
#[derive(Debug, Default, Clone, Copy)]
pub struct FxHasher(u64);

impl FxHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        for &b in chunks.remainder() {
            self.add(b as u64);
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        // hashbrown takes the bucket from the low bits: fold the high ones in.
        self.0 ^ (self.0 >> 29)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_works_and_hashes_differ() {
        let mut m: FastMap<String, u32> = FastMap::default();
        m.insert("a;b".into(), 1);
        *m.entry("a;b".into()).or_default() += 2;
        assert_eq!(m["a;b"], 3);
        let h = |s: &str| FastHash.hash_one(s);
        assert_ne!(h("a;b"), h("a;c"));
        assert_eq!(h("same"), h("same"));
    }
}
