//! The vDSO has no file, but it is the same image in every process of one
//! kernel: a copy of this process's own names the `[vdso]` frames of the
//! stream's processes (`__vdso_clock_gettime`).
//!
//! The copy is a memory file (`memfd_create`), read by its
//! `/proc/self/fd/N` path: it has no name in any folder, so nothing can be
//! planted where it is written (`sudo scripts/wallclock` runs stacksym as
//! root; a file at a predictable name in /tmp followed a symbolic link
//! planted there) and nothing is left behind however the process ends
//! (the filters leave through `process::exit`, without destructors, and a
//! signal skips them too).

use std::ffi::CStr;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::PathBuf;

/// This process's vDSO as a file, closed (and gone) with the process.
pub struct VdsoFile {
    pub path: PathBuf,
    _file: File,
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
        let (path, file) = memory_file(c"wallclock-vdso", image)?;
        Some(VdsoFile { path, _file: file })
    }
}

/// A memory file named `name` holding `bytes`, and the path it is read by
/// (valid while the file is open).
pub(crate) fn memory_file(name: &CStr, bytes: &[u8]) -> Option<(PathBuf, File)> {
    // SAFETY: a NUL-terminated name; the new descriptor is ours alone.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let mut file = unsafe { File::from_raw_fd(fd) };
    file.write_all(bytes).ok()?;
    let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    Some((path, file))
}

#[cfg(test)]
mod tests {
    /// The copy is an ELF file that can be read by its path, and no file
    /// of it is in the temporary folder.
    #[test]
    fn the_copy_is_readable_and_in_no_folder() {
        let v = super::VdsoFile::create().expect("this process has a vDSO");
        let bytes = std::fs::read(&v.path).unwrap();
        assert!(bytes.starts_with(b"\x7fELF"));
        let target = std::fs::read_link(&v.path).unwrap();
        assert!(target.to_string_lossy().starts_with("/memfd:wallclock-vdso"), "{target:?}");
    }
}
