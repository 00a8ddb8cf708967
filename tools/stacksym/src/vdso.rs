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
        let mut file = memory_file(c"wallclock-vdso")?;
        file.write_all(image).ok()?;
        Some(VdsoFile { path: path_of(&file), _file: file })
    }
}

/// A new, empty memory file named `name`.
pub(crate) fn memory_file(name: &CStr) -> Option<File> {
    // SAFETY: a NUL-terminated name; the new descriptor is ours alone.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    // SAFETY: `fd` was just opened and is owned by nothing else.
    (fd >= 0).then(|| unsafe { File::from_raw_fd(fd) })
}

/// The path a memory file is read by (while it is open).
pub(crate) fn path_of(file: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
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
