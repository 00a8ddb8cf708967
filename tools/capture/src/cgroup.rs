//! `--cgroup PATH`: a cgroup v2 directory, named to BPF by its id (the
//! directory's inode) and depth, and the processes in it and below.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

#[derive(Debug, Clone)]
pub struct Cgroup {
    pub path: PathBuf,
    /// kernfs id of the directory (`cgroup->kn->id`): its inode number.
    pub id: u64,
    /// Its depth in the v2 hierarchy (`cgroup->level`; the root is 0).
    pub level: u32,
}

/// Where cgroup2 is mounted and the hierarchy path of that mount's root
/// (not `/` inside a cgroup namespace), from /proc/self/mountinfo.
fn cgroup2_mounts() -> Vec<(PathBuf, String)> {
    let s = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    s.lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            if post.split_whitespace().next()? != "cgroup2" {
                return None;
            }
            let f: Vec<&str> = pre.split_whitespace().collect();
            Some((PathBuf::from(f.get(4)?), f.get(3)?.to_string()))
        })
        .collect()
}

fn depth(p: &Path) -> u32 {
    p.components().filter(|c| matches!(c, std::path::Component::Normal(_))).count() as u32
}

impl Cgroup {
    /// Check `path` is a cgroup v2 directory; one line saying why not.
    pub fn open(path: &Path) -> Result<Cgroup> {
        let shown = path.display();
        let meta = std::fs::metadata(path).map_err(|e| anyhow::anyhow!("--cgroup {shown}: {e}"))?;
        if !meta.is_dir() {
            bail!("--cgroup {shown}: not a directory");
        }
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
        // SAFETY: c is a valid C string and st a valid statfs to fill.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 || st.f_type as i64 != CGROUP2_SUPER_MAGIC {
            let mounts = cgroup2_mounts();
            let hint = match mounts.first() {
                Some((m, _)) => format!(" (cgroup2 is mounted at {})", m.display()),
                None => " (no cgroup2 file system is mounted)".to_string(),
            };
            bail!("--cgroup {shown}: not a cgroup v2 directory{hint}");
        }
        let canon = std::fs::canonicalize(path).map_err(|e| anyhow::anyhow!("--cgroup {shown}: {e}"))?;
        let Some((mnt, root)) = cgroup2_mounts()
            .into_iter()
            .filter(|(m, _)| canon.starts_with(m))
            .max_by_key(|(m, _)| m.as_os_str().len())
        else {
            bail!("--cgroup {shown}: not under a cgroup2 mount point");
        };
        let below = canon.strip_prefix(&mnt).unwrap_or(Path::new(""));
        Ok(Cgroup { path: canon.clone(), id: meta.ino(), level: depth(Path::new(&root)) + depth(below) })
    }

    /// Processes in the cgroup and in every cgroup below it.
    pub fn procs(&self) -> Vec<u32> {
        let mut v = Vec::new();
        let mut dirs = vec![self.path.clone()];
        while let Some(d) = dirs.pop() {
            if let Ok(s) = std::fs::read_to_string(d.join("cgroup.procs")) {
                v.extend(s.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
            }
            if let Ok(rd) = std::fs::read_dir(&d) {
                dirs.extend(rd.filter_map(|e| e.ok()).filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
            }
        }
        v.sort_unstable();
        v.dedup();
        v
    }
}
