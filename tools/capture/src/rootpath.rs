//! The path of a mapped file as this process sees it, from the kernel's
//! mmap record. The kernel writes a record's path as the mapping process
//! sees it, under its own root: a process that exec'd in a chroot (a
//! container's entrypoint) maps `/usr/lib/x86_64-linux-gnu/libc.so.6`,
//! which here is the host's libc, another build. Taken as is, its stacks
//! were unwound with the host's tables and named with the host's
//! symbols: an Erlang scheduler's wait ended at `ethr_event_twait` (the
//! chroot's beam.smp, at that path, is not the host's), 0.75 s of a
//! 5 s capture. /proc/PID/maps, read from here, has the paths from our
//! root already.
//!
//! A record also has the file's inode: a path whose file here has
//! another is looked for under the process's root (/proc/PID/root, as
//! this process sees it), or the root learned for it or its parent
//! before, and taken where the inode is the same.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;

#[derive(Default)]
pub struct Roots {
    /// A process's root (not `/`) as found for one of its files.
    of: HashMap<u32, String>,
    /// (path, inode) -> the path here, once found.
    seen: HashMap<(String, u64), String>,
}

fn ino_of(path: &str) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.ino())
}

impl Roots {
    /// `pid` mapped `path` (its view), the file of inode `ino` (0:
    /// unknown): the path here.
    pub fn host_path(&mut self, pid: u32, path: String, ino: u64) -> String {
        if ino == 0 || !path.starts_with('/') {
            return path;
        }
        let key = (path, ino);
        if let Some(p) = self.seen.get(&key) {
            return p.clone();
        }
        let (path, _) = &key;
        if ino_of(path) == Some(ino) {
            self.seen.insert(key.clone(), key.0.clone());
            return key.0;
        }
        let live = std::fs::read_link(format!("/proc/{pid}/root")).ok().and_then(|r| r.to_str().map(str::to_string));
        for root in live.iter().chain(self.of.get(&pid)) {
            if root == "/" || !root.starts_with('/') {
                continue;
            }
            let there = format!("{root}{path}");
            if ino_of(&there) == Some(ino) {
                self.of.insert(pid, root.clone());
                self.seen.insert(key, there.clone());
                return there;
            }
        }
        // Not found (the process gone, its root out of reach): its own
        // path, as before.
        key.0
    }

    /// A new process `child` of `parent`: its root is its parent's.
    pub fn fork(&mut self, parent: u32, child: u32) {
        match self.of.get(&parent).cloned() {
            Some(r) => self.of.insert(child, r),
            None => self.of.remove(&child),
        };
    }

    /// What is kept: bounded by the files and processes of a capture;
    /// emptied past these.
    pub fn trim(&mut self) {
        if self.seen.len() > 65536 {
            self.seen.clear();
        }
        if self.of.len() > 65536 {
            self.of.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of ours seen from a root that is a directory of ours: its
    /// path under that root, told by its inode; our own files as they
    /// are; an unknown one as it was written.
    #[test]
    fn a_file_under_another_root_is_found_there() {
        let dir = std::env::temp_dir().join(format!("wc-rootpath-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("usr/lib")).unwrap();
        let f = dir.join("usr/lib/libx.so");
        std::fs::write(&f, b"x").unwrap();
        let ino = ino_of(f.to_str().unwrap()).unwrap();
        let mut r = Roots::default();
        let root = dir.to_str().unwrap().to_string();
        // Learned for a parent, inherited by a child gone from /proc.
        r.of.insert(1, root.clone());
        r.fork(1, u32::MAX - 1);
        assert_eq!(r.host_path(u32::MAX - 1, "/usr/lib/libx.so".into(), ino), format!("{root}/usr/lib/libx.so"));
        let me = std::env::current_exe().unwrap();
        let me = me.to_str().unwrap();
        assert_eq!(r.host_path(std::process::id(), me.into(), ino_of(me).unwrap()), me);
        let mut fresh = Roots::default();
        assert_eq!(fresh.host_path(u32::MAX - 2, "/usr/lib/libx.so".into(), ino), "/usr/lib/libx.so");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
