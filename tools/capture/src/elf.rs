//! The ELF files target processes map: read (mapped, only the pages of
//! the tables looked at), and where each of their mappings loads.

use std::ops::Range;
use std::sync::Arc;

/// An ELF file, mapped rather than read: a libpython with its debug info
/// is 30 MB, its symbol and unwind tables a few hundred KB.
pub fn map_file(path: &str) -> Option<memmap2::Mmap> {
    let f = open_file(path)?;
    // SAFETY: a read-only private mapping. A file truncated while mapped
    // would fault on access; the files mapped here are executables and
    // libraries in use, which are replaced (renamed over), not truncated.
    let m = unsafe { memmap2::Mmap::map(&f) }.ok()?;
    let _ = m.advise(memmap2::Advice::Random);
    Some(m)
}

/// A file a process maps, opened as one it controls: no link followed, a
/// regular file (a fifo renamed over a library's path would hold the
/// open; a device's mapping would read without end), else said once.
pub fn open_file(path: &str) -> Option<std::fs::File> {
    match wallclock_stream::safe_open::open(std::path::Path::new(path), wallclock_stream::safe_open::Owner::Any) {
        Ok(f) => f,
        // A device's mapping (GPU drivers', opcache's /dev/zero) is usual.
        Err(why) if why.why.ends_with(" device)") => None,
        Err(why) => {
            use std::sync::Mutex;
            static SAID: Mutex<Vec<String>> = Mutex::new(Vec::new());
            let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
            if !said.contains(&why.path) {
                let tool = std::env::args().next().unwrap_or_default();
                eprintln!("{}: warning: {why}", tool.rsplit('/').next().unwrap_or("capture"));
                said.push(why.path);
            }
            None
        }
    }
}

/// Bytes of an ELF file or of one of its sections: a range of the file
/// as mapped (only the pages looked at are read in, and they are the page
/// cache's), or owned where they had to be made (an inflated section, the
/// vDSO's copy). Copying every file's .text and unwind tables took 300 MB
/// system-wide on a machine running compilers (cc1's .text is 20 MB,
/// librustc_driver's 100 MB), once per file.
#[derive(Clone)]
pub enum Bytes {
    Mapped(Arc<memmap2::Mmap>, Range<usize>),
    Owned(Arc<[u8]>),
}

impl Bytes {
    pub fn mapped(map: memmap2::Mmap) -> Bytes {
        let len = map.len();
        Bytes::Mapped(Arc::new(map), 0..len)
    }

    /// `len` bytes from `offset` (of these bytes), or None past their end.
    pub fn sub(&self, offset: u64, len: u64) -> Option<Bytes> {
        let (start, end) = (usize::try_from(offset).ok()?, usize::try_from(offset.checked_add(len)?).ok()?);
        if end > self.len() {
            return None;
        }
        Some(match self {
            Bytes::Mapped(m, r) => Bytes::Mapped(m.clone(), r.start + start..r.start + end),
            Bytes::Owned(b) => Bytes::Owned(Arc::from(&b[start..end])),
        })
    }
}

impl Default for Bytes {
    fn default() -> Bytes {
        Bytes::Owned(Arc::from(&[][..]))
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m, r) => &m[r.clone()],
            Bytes::Owned(b) => b,
        }
    }
}

const PAGE: u64 = 4096;

/// The load bias of a mapping of a file at `start` from file offset
/// `offset`, given the file's PT_LOAD segments (p_offset, p_vaddr,
/// p_filesz): the segment the loader mapped there is the one whose
/// page-aligned offset is the mapping's. Only when none is (a mapping
/// split by mprotect, as RELRO does) the one holding the offset.
///
/// lld packs segments without page alignment (Rust's default linker
/// since 1.90): the text segment then begins in the read-only segment's
/// last page, which both hold, and the first segment holding the offset
/// put every frame of the text one page off.
pub fn load_bias(segments: &[(u64, u64, u64)], start: u64, offset: u64) -> Option<u64> {
    let (poff, pvaddr) = segments
        .iter()
        .find(|&&(o, _, _)| o & !(PAGE - 1) == offset)
        .or_else(|| segments.iter().find(|&&(o, _, sz)| offset >= o && offset < o + sz.max(1)))
        .map(|&(o, v, _)| (o, v))?;
    Some((start + poff).wrapping_sub(offset).wrapping_sub(pvaddr))
}

/// `n` bytes of `obj`'s `.text` at link-time address `a` (what a reader
/// decodes to find a variable a function uses).
pub fn code_at<'a>(obj: &'a object::File, a: u64, n: u64) -> Option<&'a [u8]> {
    use object::{Object, ObjectSection};
    let text = obj.section_by_name(".text")?;
    let d = text.data().ok()?;
    let off = a.checked_sub(text.address())? as usize;
    d.get(off..off.checked_add(n as usize)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_sharing_a_page_loads_at_its_own_address() {
        // lld's layout (a Rust release binary): R at 0, R E from 0x1288e0
        // (vaddr 0x1298e0), RW from 0x4584a0 (vaddr 0x45a4a0).
        let segs = [(0, 0, 0x1288d8), (0x1288e0, 0x1298e0, 0x32fbc0), (0x4584a0, 0x45a4a0, 0x170b0)];
        let base = 0x5555_0000_0000;
        assert_eq!(load_bias(&segs, base, 0), Some(base));
        assert_eq!(load_bias(&segs, base + 0x129000, 0x128000), Some(base));
        assert_eq!(load_bias(&segs, base + 0x45a000, 0x458000), Some(base));
        // GNU ld's page-aligned layout, and a RELRO split inside a segment.
        let segs = [(0, 0, 0x1000), (0x1000, 0x1000, 0x5000), (0x6df0, 0x7df0, 0x400)];
        assert_eq!(load_bias(&segs, base + 0x1000, 0x1000), Some(base));
        assert_eq!(load_bias(&segs, base + 0x7000, 0x6000), Some(base));
        assert_eq!(load_bias(&segs, base + 0x8000, 0x7000), Some(base));
        assert_eq!(load_bias(&segs, base, 0x9000), None);
    }
}
