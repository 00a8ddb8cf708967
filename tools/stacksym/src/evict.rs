//! Files dropped from the symbolizer once the processes that map them
//! are done. blazesym keeps every ELF file it opened mapped, with its
//! parsed symbol and line tables, for the life of the `Symbolizer`: a
//! system-wide capture names the stacks of every program on the machine
//! (rustc's librustc_driver, cc1, our own tools with their DWARF), and
//! stacksym held them all at once (230 MB of file pages, 180 MB of
//! heap for a 30 s capture of a machine running builds). Processes are
//! taken by executable, so that those of one program come together, and
//! at the first process of each program the files (with their separate
//! debug files) that none of its processes maps are dropped: each big
//! program's files are read once per batch and let go, the shared
//! libraries stay.
//!
//! Per program, not per process: a build's short processes are often
//! captured with their executable and the loader only (their maps taken
//! at exec), side by side with others of the same program that have all
//! their libraries, and cc1's files were read again 870 times for 30 s
//! of `make -j2` when a file was dropped as soon as the next process did
//! not map it. Not per batch either: two capture tools with 36 MB of
//! DWARF each were then held at once.

use std::collections::HashSet;
use std::rc::Rc;

use blazesym::symbolize::evict::{Elf, Evict};

use crate::engine::Engine;
use crate::procmaps;

impl Engine {
    /// `pids` in the order their stacks are best named in: by the file of
    /// their lowest file mapping (the executable, for a PIE or not), then
    /// by pid; each with that file.
    pub(crate) fn by_image(&self, pids: impl Iterator<Item = u32>) -> Vec<(Rc<str>, u32)> {
        let exe = |pid: u32| -> Rc<str> {
            let maps = self.stream_maps.get(&pid).or_else(|| self.snapshots.get(&pid));
            let first = maps.and_then(|m| m.iter().filter(|e| procmaps::is_file(e)).min_by_key(|e| e.start));
            first.map(|e| e.path().clone()).unwrap_or_default()
        };
        let mut v: Vec<(Rc<str>, u32)> = pids.map(|p| (exe(p), p)).collect();
        v.sort_unstable();
        v
    }

    /// The files `pid` maps (none when nothing is known of it).
    fn files_of(&self, pid: u32, files: &mut HashSet<Rc<str>>) {
        for maps in [self.stream_maps.get(&pid), self.snapshots.get(&pid)].into_iter().flatten() {
            files.extend(maps.iter().filter(|e| procmaps::is_file(e)).map(|e| e.path().clone()));
        }
    }

    /// For processes in [`Engine::by_image`] order, the files to drop
    /// before naming the stacks of each: at the first process of each
    /// program, those of `open` (the files of the processes named
    /// before) that no process of this program maps. `open` is kept up
    /// to date as the plan goes.
    pub(crate) fn eviction_plan(&self, pids: &[(Rc<str>, u32)], open: &mut HashSet<Rc<str>>) -> Vec<Vec<Rc<str>>> {
        let mut plan = vec![Vec::new(); pids.len()];
        let mut start = 0;
        while start < pids.len() {
            let end = start + pids[start..].iter().take_while(|(exe, _)| *exe == pids[start].0).count();
            let mut files = HashSet::new();
            for (_, pid) in &pids[start..end] {
                self.files_of(*pid, &mut files);
            }
            // Nothing known of these processes: no reason to drop anything.
            if !files.is_empty() {
                plan[start] = open.difference(&files).cloned().collect();
                *open = files;
            }
            start = end;
        }
        plan
    }

    /// Drop `files` from the symbolizer, and the debug files found for them.
    pub(crate) fn evict(&mut self, files: &[Rc<str>]) {
        for path in files {
            let _ = self.symbolizer.evict(&Evict::Elf(Elf::new(&**path)));
            if let Some(debug) = crate::debugfile::found(path.as_ref().as_ref()) {
                let _ = self.symbolizer.evict(&Evict::Elf(Elf::new(debug)));
            }
        }
    }
}
