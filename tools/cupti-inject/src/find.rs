//! Where libcupti is looked for, by absolute path, in order:
//! `$WALLCLOCK_CUPTI_PATH` (a file, or a folder holding libcupti.so*);
//! the `nvidia/cuda_cupti/lib` folder of the Python package beside any
//! loaded library that lives under a `site-packages` or `dist-packages`
//! folder (torch's own libcudart, libtorch...), and of each `$PYTHONPATH`
//! entry, and CUDA 13's `nvidia/cu13/lib` (its wheels put every library
//! in one folder per CUDA major: torch 2.11's cu130 build); `$CUDA_HOME`/`$CUDA_PATH`, `/usr/local/cuda` and
//! `/usr/local/cuda-*` (`extras/CUPTI/lib64`, `lib64`); every
//! `$LD_LIBRARY_PATH` folder; the system library folders.

use std::path::{Path, PathBuf};

/// What `gputrace -p --cupti` (or its WALLCLOCK_CUPTI_PATH) names, for a
/// process attached to: first, as `$WALLCLOCK_CUPTI_PATH` would be.
pub static OVERRIDE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Candidate files, best first, without duplicates.
pub fn candidates() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut files: Vec<PathBuf> = Vec::new();
    let explicit = OVERRIDE.get().map(|p| p.clone().into_os_string()).or_else(|| std::env::var_os("WALLCLOCK_CUPTI_PATH"));
    if let Some(p) = explicit.filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if p.is_dir() {
            dirs.push(p);
        } else {
            files.push(p);
        }
    }
    for site in site_packages() {
        dirs.extend(wheel_dirs(&site));
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(h) = std::env::var_os(var).filter(|p| !p.is_empty()) {
            let h = PathBuf::from(h);
            dirs.push(h.join("extras/CUPTI/lib64"));
            dirs.push(h.join("lib64"));
        }
    }
    let mut cuda_dirs = vec![PathBuf::from("/usr/local/cuda")];
    if let Ok(rd) = std::fs::read_dir("/usr/local") {
        let mut v: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("cuda-")))
            .collect();
        v.sort();
        v.reverse();
        cuda_dirs.extend(v);
    }
    for h in cuda_dirs {
        dirs.push(h.join("extras/CUPTI/lib64"));
        dirs.push(h.join("lib64"));
    }
    if let Some(lp) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&lp).filter(|p| !p.as_os_str().is_empty()));
    }
    for d in ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu"] {
        dirs.push(PathBuf::from(d));
    }
    for d in dirs {
        files.extend(cupti_in(&d));
    }
    let mut seen = std::collections::HashSet::new();
    files.retain(|f| seen.insert(f.clone()));
    files
}

/// Where NVIDIA's wheels put libcupti under a site-packages folder: CUDA
/// 12's `nvidia/cuda_cupti/lib`, then CUDA 13's and later's
/// `nvidia/cuNN/lib`, the highest major first.
fn wheel_dirs(site: &Path) -> Vec<PathBuf> {
    let mut majors: Vec<(u32, PathBuf)> = std::fs::read_dir(site.join("nvidia"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let major = n.strip_prefix("cu")?.parse::<u32>().ok()?;
            Some((major, e.path().join("lib")))
        })
        .collect();
    majors.sort_by_key(|(m, _)| std::cmp::Reverse(*m));
    std::iter::once(site.join("nvidia/cuda_cupti/lib")).chain(majors.into_iter().map(|(_, p)| p)).collect()
}

/// libcupti.so* files of `dir`: the unversioned name first, then the
/// highest version.
fn cupti_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("libcupti.so")))
        .collect();
    v.sort_by_key(|p| std::cmp::Reverse(p.file_name().map(|n| n.len()).unwrap_or(0)));
    v.sort_by_key(|p| p.file_name().map(|n| n != "libcupti.so").unwrap_or(true));
    v
}

/// `.../site-packages` folders: of the libraries mapped into this process
/// (a PyTorch program has torch's libraries mapped by the time it calls
/// CUDA), then of `$PYTHONPATH`.
fn site_packages() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let maps = wallclock_stream::procmaps::read(std::process::id()).unwrap_or_default();
    let paths = maps.into_iter().map(|m| m.entry.path).filter(|p| !p.is_empty());
    let pythonpath = std::env::var_os("PYTHONPATH")
        .map(|p| std::env::split_paths(&p).map(|p| p.to_string_lossy().into_owned()).collect::<Vec<_>>())
        .unwrap_or_default();
    for p in paths.chain(pythonpath) {
        for marker in ["/site-packages", "/dist-packages"] {
            if let Some(i) = p.find(marker) {
                let site = PathBuf::from(&p[..i + marker.len()]);
                if !out.contains(&site) {
                    out.push(site);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_13_wheels_folder_found_after_cuda_12s() {
        let site = std::env::temp_dir().join(format!("wc-find-{}", std::process::id()));
        for d in ["nvidia/cuda_cupti/lib", "nvidia/cu13/lib", "nvidia/cu14/lib", "nvidia/cudnn/lib", "nvidia/cublas/lib"] {
            std::fs::create_dir_all(site.join(d)).unwrap();
        }
        std::fs::write(site.join("nvidia/cu13/lib/libcupti.so.13"), "").unwrap();
        let dirs = wheel_dirs(&site);
        let names: Vec<String> = dirs.iter().map(|d| d.strip_prefix(&site).unwrap().display().to_string()).collect();
        assert_eq!(names, ["nvidia/cuda_cupti/lib", "nvidia/cu14/lib", "nvidia/cu13/lib"]);
        assert_eq!(cupti_in(&dirs[2]), [site.join("nvidia/cu13/lib/libcupti.so.13")]);
        std::fs::remove_dir_all(&site).unwrap();
    }
}
