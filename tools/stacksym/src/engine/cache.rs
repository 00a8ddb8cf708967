//! What the engine remembers of the addresses it named, and when it lets
//! go of it.
//!
//! Per address space (a process, or the kernel): each address's frames, as
//! ids of the stack table, and the stacks met before
//! ([`crate::known`]). A system-wide capture has thousands of processes
//! (a build's cc1, as, sh), each seen once, its stacks side by side in
//! the stream: kept for the whole run, their caches were most of
//! stacksym's memory (370k addresses of 5,900 processes, 120 MB of heap
//! for 30 s of a machine running builds). So once they hold more than
//! [`EVICT_AT`] addresses, the caches of processes that neither this
//! batch of stacks nor the one before touched are dropped: they are
//! caches, named again the same way should such a process come back
//! (cheaply: by file offset, below).
//!
//! Per file: the frames of each file offset, shared by every process that
//! maps the file. A build's 2,000 cc1 processes ask for the same 30k code
//! addresses of cc1 and its libraries; each looked up by itself was half
//! of stacksym's time.

use std::rc::Rc;

use wallclock_stream::fasthash::FastMap;
use wallclock_stream::Frame;

use crate::engine::{Engine, Space};
use crate::knownstacks::KnownStacks;

/// Cached addresses of all processes at which the caches of processes
/// no longer met are dropped (a few hundred bytes each, stack included).
pub(crate) const EVICT_AT: usize = 1 << 14;

/// Index into [`Engine::modules`] meaning: named.
pub(crate) const NAMED: u32 = u32::MAX;

/// One address's frames.
#[derive(Debug, Clone)]
pub(crate) struct Addr {
    /// Its frames, as ids of the engine's table (shared with the file
    /// offset's entry).
    pub(crate) ids: Rc<[u32]>,
    /// The module it is left unnamed in (`Engine::modules`), or [`NAMED`].
    pub(crate) unnamed: u32,
    /// Whether its first frame is in CPython (where a `[GIL]` frame may
    /// go: [`crate::gil::before`]), known without a look at the frame.
    pub(crate) cpython: bool,
}

/// What is cached of one address space.
#[derive(Default)]
pub(crate) struct SpaceCache {
    /// By (address, is a return address).
    pub(crate) addrs: FastMap<(u64, bool), Addr>,
    /// Stacks written before.
    pub(crate) known: KnownStacks,
    /// The batch ([`Engine::prepare`]) that last met it.
    pub(crate) used: u64,
    /// Unnamed addresses already counted in the trailer by a cache of
    /// this process dropped before.
    counted: Counted,
}

/// Addresses, sorted: return addresses and the others apart (8 bytes
/// each: a build leaves 140k addresses unnamed, in stripped binaries).
#[derive(Debug, Default)]
pub(crate) struct Counted {
    ret: Box<[u64]>,
    ip: Box<[u64]>,
}

impl Counted {
    fn contains(&self, (addr, ret): (u64, bool)) -> bool {
        let list = if ret { &self.ret } else { &self.ip };
        list.binary_search(&addr).is_ok()
    }

    fn is_empty(&self) -> bool {
        self.ret.is_empty() && self.ip.is_empty()
    }
}

impl SpaceCache {
    /// Whether the unnamed `(addr, ret)` was counted already.
    pub(crate) fn counted(&self, key: (u64, bool)) -> bool {
        self.addrs.get(&key).is_some_and(|a| a.unnamed != NAMED) || self.counted.contains(key)
    }

    /// The unnamed addresses counted by this cache and those before it.
    fn unnamed(self) -> Counted {
        let (mut ret, mut ip) = (self.counted.ret.into_vec(), self.counted.ip.into_vec());
        for ((addr, is_ret), a) in self.addrs {
            if a.unnamed != NAMED {
                if is_ret {
                    ret.push(addr)
                } else {
                    ip.push(addr)
                }
            }
        }
        ret.sort_unstable();
        ip.sort_unstable();
        Counted { ret: ret.into(), ip: ip.into() }
    }
}

impl Engine {
    /// The cache of `space`, made (and marked as met) when missing.
    pub(crate) fn space_mut(&mut self, space: Space) -> &mut SpaceCache {
        match space {
            Space::Kernel => &mut self.kernel,
            Space::User(pid) => {
                let generation = self.generation;
                let retired = &mut self.retired;
                let c = self.spaces.entry(pid).or_insert_with(|| SpaceCache {
                    counted: retired.remove(&pid).unwrap_or_default(),
                    ..SpaceCache::default()
                });
                c.used = generation;
                c
            }
        }
    }

    pub(crate) fn space(&self, space: Space) -> Option<&SpaceCache> {
        match space {
            Space::Kernel => Some(&self.kernel),
            Space::User(pid) => self.spaces.get(&pid),
        }
    }

    /// Start a batch: drop the caches of processes the last two batches
    /// did not meet, once the caches hold [`EVICT_AT`] addresses. What
    /// they counted as unnamed is kept (a trailer counts each address
    /// once).
    pub(crate) fn next_batch(&mut self) {
        self.generation += 1;
        let held: usize = self.spaces.values().map(|c| c.addrs.len()).sum();
        if held < EVICT_AT {
            return;
        }
        let old: Vec<u32> = self.spaces.iter().filter(|(_, c)| c.used + 1 < self.generation).map(|(&p, _)| p).collect();
        for pid in old {
            if let Some(c) = self.spaces.remove(&pid) {
                self.retire(pid, c);
            }
        }
    }

    fn retire(&mut self, pid: u32, c: SpaceCache) {
        // Its perf map too (read again should the process come back).
        self.perf_maps.remove(&pid);
        let unnamed = c.unnamed();
        if !unnamed.is_empty() {
            self.retired.insert(pid, unnamed);
        }
    }

    /// Drop every cache (the table is emptied: no id stays valid).
    pub(crate) fn drop_caches(&mut self) {
        for (pid, c) in std::mem::take(&mut self.spaces) {
            self.retire(pid, c);
        }
        let kernel = std::mem::take(&mut self.kernel);
        self.kernel.counted = kernel.unnamed();
        self.files.clear();
    }

    /// Remember the frames of `addr` in `space`: count it when unnamed.
    pub(crate) fn remember(&mut self, space: Space, addr: u64, ret: bool, ids: Rc<[u32]>) {
        let unnamed = self.note_unnamed(space, (addr, ret), &ids);
        let cpython = ids.first().is_some_and(|&f| crate::gil::in_cpython(self.table.frame(f)));
        self.space_mut(space).addrs.insert((addr, ret), Addr { ids, unnamed, cpython });
        self.remembered += 1;
    }

    /// Table ids of `frames`.
    pub(crate) fn intern(&mut self, frames: &[Frame]) -> Rc<[u32]> {
        frames.iter().map(|f| self.table.frame_id(f)).collect()
    }

    /// The id of a file's path, for [`Engine::files`].
    pub(crate) fn file_id(&mut self, path: &str) -> u32 {
        if let Some(&id) = self.file_ids.get(path) {
            return id;
        }
        let id = self.file_ids.len() as u32;
        self.file_ids.insert(path.to_string(), id);
        id
    }

    /// The index in [`Engine::modules`] of the module `m`.
    pub(crate) fn module_id(&mut self, m: &str) -> u32 {
        if let Some(&id) = self.module_ids.get(m) {
            return id;
        }
        let id = self.modules.len() as u32;
        self.modules.push(m.into());
        self.module_ids.insert(m.into(), id);
        id
    }
}
