//! Files dropped from the symbolizer once the processes that map them
//! are done. blazesym keeps every ELF file it opened mapped, with its
//! parsed symbol and line tables, for the life of the `Symbolizer`: a
//! system-wide capture names the stacks of every program on the machine
//! (rustc's librustc_driver, cc1, our own tools with their DWARF), and
//! stacksym held them all at once (230 MB of file pages, 180 MB of
//! heap for a 30 s capture of a machine running builds). Processes are
//! taken by executable, so that those of one program come together, and
//! a file is dropped when the next process does not map it: each big
//! program's files are read once and let go, the shared libraries stay.

use std::collections::HashSet;
use std::rc::Rc;

use blazesym::symbolize::evict::{Elf, Evict};

use crate::engine::Engine;
use crate::procmaps;

impl Engine {
    /// `pids` in the order their stacks are best named in: by the file of
    /// their lowest file mapping (the executable, for a PIE or not), then
    /// by pid.
    pub(crate) fn by_image(&self, pids: impl Iterator<Item = u32>) -> Vec<u32> {
        let exe = |pid: u32| -> Rc<str> {
            let maps = self.stream_maps.get(&pid).or_else(|| self.snapshots.get(&pid));
            let first = maps.and_then(|m| m.iter().filter(|e| procmaps::is_file(e)).min_by_key(|e| e.start));
            first.map(|e| e.path.clone()).unwrap_or_default()
        };
        let mut v: Vec<(Rc<str>, u32)> = pids.map(|p| (exe(p), p)).collect();
        v.sort_unstable();
        v.into_iter().map(|(_, p)| p).collect()
    }

    /// Before naming the stacks of `pid`: drop the files of `open` (those
    /// of the processes named so far) that `pid` does not map; `open`
    /// becomes `pid`'s files.
    pub(crate) fn evict_unused(&mut self, pid: u32, open: &mut HashSet<Rc<str>>) {
        let mut files: HashSet<Rc<str>> = HashSet::new();
        for maps in [self.stream_maps.get(&pid), self.snapshots.get(&pid)].into_iter().flatten() {
            files.extend(maps.iter().filter(|e| procmaps::is_file(e)).map(|e| e.path.clone()));
        }
        // Nothing known of it (no maps record): no reason to drop anything.
        if files.is_empty() {
            return;
        }
        for path in open.difference(&files) {
            let _ = self.symbolizer.evict(&Evict::Elf(Elf::new(&**path)));
        }
        *open = files;
    }
}

