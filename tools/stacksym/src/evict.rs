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

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use blazesym::symbolize::evict::{Elf, Evict};

use crate::engine::Engine;
use crate::engine::procmaps;

/// Files from this size on (cc1, libLLVM, a Rust program with its DWARF:
/// 24 MB of its pages read and 10-15 MB of tables parsed to name a few
/// addresses) are dropped at the end of each run of one program's
/// processes, not kept for a later one in the batch.
const BIG: u64 = 8 << 20;

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

    /// The files holding the addresses `keys` (address, is a return
    /// address) of `pid`: those its stacks need read.
    fn needed(&self, pid: u32, keys: &[(u64, bool)], files: &mut HashSet<Rc<str>>) {
        for maps in [self.stream_maps.get(&pid), self.snapshots.get(&pid)].into_iter().flatten() {
            for &(addr, ret) in keys {
                let at = if ret { addr.saturating_sub(1) } else { addr };
                if let Some(m) = procmaps::find(maps, at).filter(|m| procmaps::is_file(m)) {
                    files.insert(m.path().clone());
                }
            }
        }
    }

    /// For processes in [`Engine::by_image`] order, with the addresses of
    /// each to look up (`keys`), the files to drop before naming the
    /// stacks of each: a small file once no process from it on in the
    /// batch needs it, a big one ([`BIG`]) once no process from it on
    /// in the program's run of processes does (a process that ran
    /// another program before its exec has both), or once a process needs
    /// another big one. `open` (the files that may be open) is dropped
    /// from at the first.
    pub(crate) fn eviction_plan(
        &mut self,
        pids: &[(Rc<str>, u32)],
        keys: &HashMap<u32, Vec<(u64, bool)>>,
        open: &mut HashSet<Rc<str>>,
    ) -> Vec<Vec<Rc<str>>> {
        let mut plan = vec![Vec::new(); pids.len()];
        if pids.is_empty() {
            return plan;
        }
        // The last process needing each file, in the batch and in the
        // program's run (the end of an earlier run: a drop).
        let mut last: HashMap<Rc<str>, usize> = HashMap::new();
        let mut drops: Vec<(Rc<str>, usize)> = Vec::new();
        let mut big: Vec<Vec<Rc<str>>> = vec![Vec::new(); pids.len()];
        for (i, (exe, pid)) in pids.iter().enumerate() {
            let mut files = HashSet::new();
            self.needed(*pid, keys.get(pid).map_or(&[][..], Vec::as_slice), &mut files);
            for f in files {
                let is_big = self.is_big(&f);
                if let Some(&j) = last.get(&f) {
                    if pids[j].0 != *exe && is_big {
                        drops.push((f.clone(), j + 1));
                    }
                }
                if is_big {
                    big[i].push(f.clone());
                }
                last.insert(f, i);
            }
        }
        plan[0] = open.iter().filter(|f| !last.contains_key(*f)).cloned().collect();
        // The files of the batch's last process stay open for the next
        // batch, which drops them first thing if it does not need them.
        drops.extend(last.iter().map(|(f, &i)| (f.clone(), i + 1)));
        for (f, i) in drops {
            if let Some(at) = plan.get_mut(i) {
                at.push(f);
            }
        }
        // One big file at a time, unless one process needs two: a capture
        // tool's DWARF and a compiler's libLLVM were held at once.
        let mut open_big: HashSet<Rc<str>> = open.iter().filter(|f| self.file_sizes.get(*f) == Some(&true)).cloned().collect();
        for (at, needs) in plan.iter_mut().zip(big) {
            for f in at.iter() {
                open_big.remove(f);
            }
            if !needs.is_empty() {
                at.extend(open_big.iter().filter(|f| !needs.contains(f)).cloned());
                open_big = needs.into_iter().collect();
            }
        }
        *open = last.into_keys().collect();
        plan
    }

    /// Whether the file at `path` is [`BIG`] (asked once per file).
    fn is_big(&mut self, path: &Rc<str>) -> bool {
        *self.file_sizes.entry(path.clone()).or_insert_with(|| std::fs::metadata(&**path).is_ok_and(|m| m.len() >= BIG))
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
