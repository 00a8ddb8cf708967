//! The vDSO has no file, but it is the same image in every process of one
//! kernel: a copy of this process's own, written to a temporary file, names
//! the `[vdso]` frames of the stream's processes (`__vdso_clock_gettime`).

use std::path::PathBuf;

/// A temporary ELF file holding this process's vDSO, removed on drop.
pub struct VdsoFile {
    pub path: PathBuf,
}

impl VdsoFile {
    pub fn create() -> Option<VdsoFile> {
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
        let (range, _) = line.split_once(' ')?;
        let (a, b) = range.split_once('-')?;
        let (start, end) = (usize::from_str_radix(a, 16).ok()?, usize::from_str_radix(b, 16).ok()?);
        if end <= start || end - start > 1 << 20 {
            return None;
        }
        // SAFETY: the kernel maps the vDSO readable for the life of the
        // process, at exactly this range.
        let image = unsafe { std::slice::from_raw_parts(start as *const u8, end - start) };
        if !image.starts_with(b"\x7fELF") {
            return None;
        }
        let path = std::env::temp_dir().join(format!("wallclock-stacksym-vdso-{}.so", std::process::id()));
        std::fs::write(&path, image).ok()?;
        Some(VdsoFile { path })
    }
}

impl Drop for VdsoFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
