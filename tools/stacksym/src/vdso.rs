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
        let maps = wallclock_stream::procmaps::read(std::process::id())?;
        let vdso = maps.into_iter().find(|m| m.entry.path == "[vdso]")?.entry;
        let (start, end) = (usize::try_from(vdso.start).ok()?, usize::try_from(vdso.end).ok()?);
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
