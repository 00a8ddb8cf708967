//! A cgroup of the test's own: where cgroup v2 is mounted, and a guard
//! that removes the test's cgroup however the test ends.

use std::path::PathBuf;

/// The cgroup v2 mount point, from /proc/self/mounts.
pub fn cgroup2_mount() -> Option<PathBuf> {
    let s = std::fs::read_to_string("/proc/self/mounts").ok()?;
    s.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
    })
}

/// Removes the test's cgroup (the first path), moving stragglers out to
/// the second first, however the test ends.
pub struct TempCgroup(pub PathBuf, pub PathBuf);

impl Drop for TempCgroup {
    fn drop(&mut self) {
        if let Ok(s) = std::fs::read_to_string(self.0.join("cgroup.procs")) {
            for p in s.lines() {
                let _ = std::fs::write(self.1.join("cgroup.procs"), p);
            }
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}
