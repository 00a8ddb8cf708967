//! 1.5: kernel code that exists only while it is loaded, named as the
//! kernel named it during the capture. A BPF program's JIT-ed image is in
//! `/proc/kallsyms` (`bpf_prog_<tag>_<name>`, module `[bpf]`) only while
//! the program is loaded; a symbolizer that reads kallsyms after the
//! capture unloaded its programs finds nothing there, and a lookup by the
//! nearest lower symbol then names such an address after whatever kernel
//! symbol comes before it, far away. The capture lists those symbols in a
//! [`Ksyms`] record, which symbolizers read before the live kallsyms.

use bincode::{Decode, Encode};
use serde::{Deserialize, Serialize};

/// The symbols of one kernel module of loadable code (`[bpf]`), as
/// `/proc/kallsyms` listed them while the capture ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Encode, Decode)]
pub struct Ksyms {
    /// The module as kallsyms writes it, brackets included: `[bpf]`.
    pub module: String,
    /// Sorted by address, not overlapping.
    pub syms: Vec<Ksym>,
}

/// One symbol of a [`Ksyms`] record: `[addr, addr + len)` is its code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Encode, Decode)]
pub struct Ksym {
    pub addr: u64,
    /// Its extent in bytes: the JIT-ed length the kernel reported for the
    /// program's function, else the distance to the next kallsyms symbol.
    pub len: u64,
    pub name: String,
}

/// The module BPF programs (and trampolines, dispatchers) have in kallsyms.
pub const BPF_MODULE: &str = "[bpf]";

impl Ksyms {
    /// The symbol whose code holds `addr`, if one does.
    pub fn find(&self, addr: u64) -> Option<&Ksym> {
        let i = self.syms.partition_point(|s| s.addr <= addr);
        let s = self.syms.get(i.checked_sub(1)?)?;
        (addr - s.addr < s.len).then_some(s)
    }

    /// Add `other`'s symbols of the same module (a later read: programs
    /// loaded since), keeping the order and one symbol per address.
    pub fn merge(&mut self, other: Ksyms) {
        self.syms.extend(other.syms);
        self.syms.sort_by_key(|s| s.addr);
        self.syms.dedup_by_key(|s| s.addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(addr: u64, len: u64, name: &str) -> Ksym {
        Ksym { addr, len, name: name.into() }
    }

    #[test]
    fn find_is_bounded_by_the_extent() {
        let k = Ksyms { module: BPF_MODULE.into(), syms: vec![sym(100, 10, "a"), sym(200, 50, "b")] };
        assert_eq!(k.find(99), None);
        assert_eq!(k.find(100).map(|s| &*s.name), Some("a"));
        assert_eq!(k.find(109).map(|s| &*s.name), Some("a"));
        assert_eq!(k.find(110), None, "past a's end, before b");
        assert_eq!(k.find(249).map(|s| &*s.name), Some("b"));
        assert_eq!(k.find(250), None);
    }

    #[test]
    fn merge_keeps_one_per_address() {
        let mut k = Ksyms { module: BPF_MODULE.into(), syms: vec![sym(200, 5, "b"), sym(100, 5, "a")] };
        k.syms.sort_by_key(|s| s.addr);
        k.merge(Ksyms { module: BPF_MODULE.into(), syms: vec![sym(300, 5, "c"), sym(100, 5, "a")] });
        let names: Vec<&str> = k.syms.iter().map(|s| &*s.name).collect();
        assert_eq!(names, ["a", "b", "c"]);
    }
}
