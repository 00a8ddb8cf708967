//! Separate debug files of stripped binaries, where debuggers look for them.
//!
//! blazesym follows a binary's `.gnu_debuglink` itself (to
//! `/usr/lib/debug/.build-id/xx/yyyy.debug`, the binary's directory and
//! `/usr/lib/debug/DIR/`), and falls back to `.dynsym`. What it does not
//! try, and GDB does, is `DIR/.debug/LINK` and the build-id path of a
//! binary that has a build id but no debuglink: [`find`] tries every place,
//! and says where it looked when nothing is there.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use wallclock_stream::Frame;

use crate::engine::Options;

/// Where debuggers keep separate debug files.
pub const DEBUG_ROOT: &str = "/usr/lib/debug";

/// A debug file for `binary`, or the places looked at.
pub fn find(binary: &Path) -> Result<PathBuf, Vec<PathBuf>> {
    let places = candidates(binary);
    // Beside the binary, the folder may be the process's own (a binary in
    // its /tmp): no link there is followed. Under DEBUG_ROOT, root's, the
    // build-id names are links by design.
    let usable = |p: &&PathBuf| match p.starts_with(DEBUG_ROOT) {
        true => p.is_file(),
        false => std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_file()),
    };
    match places.iter().find(usable) {
        Some(p) => Ok(p.clone()),
        None => Err(places),
    }
}

/// What [`symbolize_stripped`] needs of a binary: its debug file (or the
/// places looked at) and its load segments.
struct Known {
    debug: Result<PathBuf, Vec<PathBuf>>,
    loads: Vec<(u64, u64, u64)>,
}

/// [`Known`] of each binary looked at.
static CACHE: OnceLock<Mutex<HashMap<PathBuf, Arc<Known>>>> = OnceLock::new();

/// [`Known`] of `binary`, found once per process: each of a build's 41
/// cc1 processes asked again, and reading the 30 MB cc1 twice for each
/// was most of stacksym's time after `wallclock -- make -j2`.
fn lookup(binary: &Path) -> Arc<Known> {
    let cache = CACHE.get_or_init(Default::default);
    if let Some(k) = cache.lock().ok().and_then(|c| c.get(binary).cloned()) {
        return k;
    }
    let debug = find(binary);
    let loads = match &debug {
        Ok(_) => Headers::open(binary).map(|h| h.load_segments()).unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    let k = Arc::new(Known { debug, loads });
    if let Ok(mut c) = cache.lock() {
        c.insert(binary.to_path_buf(), k.clone());
    }
    k
}

/// The debug file found for `binary`, if one was looked for and found
/// (nothing is looked for here).
pub fn found(binary: &Path) -> Option<PathBuf> {
    let cache = CACHE.get()?.lock().ok()?;
    cache.get(binary)?.debug.as_ref().ok().cloned()
}

/// Build-id path first, then the debuglink name beside the binary, in
/// `.debug/` beside it and under [`DEBUG_ROOT`] with the binary's directory.
pub fn candidates(binary: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(id) = blazesym::helper::read_elf_build_id(binary).ok().flatten().filter(|id| id.len() >= 2) {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        out.push(Path::new(DEBUG_ROOT).join(".build-id").join(&hex[..2]).join(format!("{}.debug", &hex[2..])));
    }
    let dir = binary.parent().unwrap_or(Path::new("/"));
    // A debuglink is a file name (GDB's): one with a `/` or `..` would
    // take the lookup anywhere.
    let link = Headers::open(binary).and_then(|h| h.debuglink()).filter(|l| !l.contains('/') && l != ".." && l != ".");
    if let Some(link) = link {
        out.push(dir.join(&link));
        out.push(dir.join(".debug").join(&link));
        out.push(Path::new(DEBUG_ROOT).join(dir.strip_prefix("/").unwrap_or(dir)).join(&link));
    }
    out.retain(|p| p != binary);
    out
}

/// The headers of an ELF64 little-endian file, read where they lie: the
/// whole file was read for them before, and cc1 is 30 MB (as much memory
/// again as the rest of stacksym, for a moment).
struct Headers {
    file: File,
    /// The ELF header.
    ehdr: [u8; 64],
}

impl Headers {
    fn open(path: &Path) -> Option<Headers> {
        let file = wallclock_stream::safe_open::open(path, wallclock_stream::safe_open::Owner::Any).ok()??;
        let mut ehdr = [0u8; 64];
        file.read_exact_at(&mut ehdr, 0).ok()?;
        // ELFCLASS64, ELFDATA2LSB.
        ehdr.starts_with(b"\x7fELF\x02\x01").then_some(Headers { file, ehdr })
    }

    fn read(&self, off: u64, len: u64) -> Option<Vec<u8>> {
        // Headers and the sections read here are small: a bad size is a bad file.
        if len > 1 << 24 {
            return None;
        }
        let mut buf = vec![0u8; len as usize];
        self.file.read_exact_at(&mut buf, off).ok()?;
        Some(buf)
    }

    fn u16_at(&self, o: usize) -> u64 {
        u16::from_le_bytes([self.ehdr[o], self.ehdr[o + 1]]) as u64
    }

    fn u64_at(&self, o: usize) -> u64 {
        u64::from_le_bytes(self.ehdr[o..o + 8].try_into().unwrap_or_default())
    }

    /// `num` table entries of `size` bytes at `off`.
    fn table(&self, off: u64, size: u64, num: u64) -> Option<Vec<u8>> {
        self.read(off, size.checked_mul(num)?)
    }

    /// (file offset, virtual address, file size) of each PT_LOAD segment.
    fn load_segments(&self) -> Vec<(u64, u64, u64)> {
        let (phoff, size, num) = (self.u64_at(0x20), self.u16_at(0x36), self.u16_at(0x38));
        let Some(t) = self.table(phoff, size, num) else { return Vec::new() };
        let u64_at = |o: usize| Some(u64::from_le_bytes(t.get(o..o + 8)?.try_into().ok()?));
        (0..num as usize)
            .filter_map(|i| {
                let h = i.checked_mul(size as usize)?;
                let is_load = t.get(h..h + 4)? == 1u32.to_le_bytes();
                is_load.then_some((u64_at(h + 8)?, u64_at(h + 0x10)?, u64_at(h + 0x20)?))
            })
            .collect()
    }

    /// The file name in the `.gnu_debuglink` section.
    fn debuglink(&self) -> Option<String> {
        let (shoff, shentsize, shnum, shstrndx) = (self.u64_at(0x28), self.u16_at(0x3a), self.u16_at(0x3c), self.u16_at(0x3e));
        let t = self.table(shoff, shentsize, shnum)?;
        let u32_at = |o: usize| Some(u32::from_le_bytes(t.get(o..o + 4)?.try_into().ok()?) as usize);
        let u64_at = |o: usize| Some(u64::from_le_bytes(t.get(o..o + 8)?.try_into().ok()?));
        let section = |i: u64| {
            let h = (i as usize).checked_mul(shentsize as usize)?;
            Some((u32_at(h)?, u64_at(h + 0x18)?, u64_at(h + 0x20)?))
        };
        let (_, stroff, strsize) = section(shstrndx)?;
        let names = self.read(stroff, strsize)?;
        for i in 0..shnum {
            let (name, off, size) = section(i)?;
            let name = names.get(name..)?.split(|&b| b == 0).next()?;
            if name == b".gnu_debuglink" {
                let data = self.read(off, size)?;
                let file = data.split(|&b| b == 0).next()?;
                return (!file.is_empty()).then(|| String::from_utf8_lossy(file).into_owned());
            }
        }
        None
    }
}

/// Look up the file offsets `offs` of the stripped `binary` (those whose
/// `found` is `Err(true)`: no symbols) in its debug file. Returns the
/// frames found (by index of `offs`) and, for the others, why, with what
/// would help.
pub fn symbolize_stripped(
    symbolizer: &Symbolizer,
    opts: &Options,
    binary: &Path,
    offs: &[u64],
    found: &[Result<Vec<Frame>, bool>],
) -> (Vec<Option<Vec<Frame>>>, String) {
    let mut frames = vec![None; offs.len()];
    let known = lookup(binary);
    let debug = match &known.debug {
        Ok(p) => p.clone(),
        Err(looked) if looked.is_empty() => {
            return (frames, "no symbols (stripped), and no build id or debuglink to find a debug file by".into())
        }
        Err(looked) => {
            let looked: Vec<String> = looked.iter().map(|p| p.display().to_string()).collect();
            let why = format!(
                "no symbols (stripped) and no debug file at {}; install its -dbgsym package or put its debug file there",
                looked.join(" or ")
            );
            return (frames, why);
        }
    };
    // A debug file keeps the program headers but not the code: file offsets
    // of the binary become virtual addresses through the binary's own.
    let loads = &known.loads;
    let vaddr = |off: u64| loads.iter().find(|(o, _, n)| *o <= off && off < o + n).map(|(o, v, _)| off - o + v);
    let todo: Vec<(usize, u64)> =
        (0..offs.len()).filter(|&i| found[i] == Err(true)).filter_map(|i| Some((i, vaddr(offs[i])?))).collect();
    let these: Vec<u64> = todo.iter().map(|&(_, v)| v).collect();
    let src = Source::Elf(Elf::new(&debug));
    let module = crate::names::basename(&binary.to_string_lossy()).to_string();
    match symbolizer.symbolize(&src, Input::VirtOffset(&these)) {
        Ok(res) => {
            for (&(i, _), s) in todo.iter().zip(&res) {
                if let Symbolized::Sym(sym) = s {
                    frames[i] = crate::names::sym_frames(sym, Some(&module), opts.no_demangle, false, false);
                }
            }
            (frames, format!("no symbol in its debug file {} covers them", debug.display()))
        }
        Err(e) => (frames, format!("its debug file {} is unreadable: {e}", debug.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_has_no_headers() {
        let dir = tempfile::tempdir().unwrap();
        for (name, bytes) in [("text", &b"not an elf"[..]), ("short", b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0")] {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            assert!(Headers::open(&p).is_none(), "{name}");
        }
        // A header whose tables lie past the end of the file.
        let mut h = vec![0u8; 64];
        h[..6].copy_from_slice(b"\x7fELF\x02\x01");
        h[0x28..0x30].copy_from_slice(&(1u64 << 40).to_le_bytes());
        h[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        h[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        let p = dir.path().join("cut");
        std::fs::write(&p, &h).unwrap();
        let cut = Headers::open(&p).unwrap();
        assert_eq!(cut.debuglink(), None);
        assert_eq!(cut.load_segments(), Vec::new());
    }

    /// This test binary: its code is in a load segment, read from its headers alone.
    #[test]
    fn load_segments_of_this_binary() {
        let exe = std::env::current_exe().unwrap();
        let loads = Headers::open(&exe).unwrap().load_segments();
        let here = load_segments_of_this_binary as *const () as u64;
        let maps = wallclock_stream::procmaps::read(std::process::id()).unwrap();
        let m = maps.iter().find(|m| m.entry.start <= here && here < m.entry.end).unwrap();
        let off = here - m.entry.start + m.entry.offset;
        assert!(loads.iter().any(|(o, _, n)| *o <= off && off < o + n), "{off:#x} in {loads:x?}");
    }
}
