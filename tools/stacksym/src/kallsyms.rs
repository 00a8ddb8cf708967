//! The kernel's symbols, read from `/proc/kallsyms` on a thread of their
//! own from the start, while the first records are read and named: the
//! kernel writes that file's 120k lines slowly (70 ms here), and stacksym
//! waited for it before it wrote its first record. The copy is a memory
//! file ([`crate::vdso::memory_file`]) that the symbolizer reads as it
//! would read `/proc/kallsyms`; where it cannot be made, the symbolizer
//! reads `/proc/kallsyms` itself as before (and says why it cannot).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

#[derive(Default)]
pub(crate) enum Kallsyms {
    /// Not asked for: the symbolizer reads `/proc/kallsyms`.
    #[default]
    Off,
    Reading(JoinHandle<Option<File>>),
    /// The copy, if one was made.
    Read(Option<(PathBuf, File)>),
}

impl Kallsyms {
    pub(crate) fn start() -> Kallsyms {
        // Copied a block at a time, with no allocation on the thread: not
        // 5 MB, nor a memory arena of the thread's own, more at the start.
        let reading = std::thread::Builder::new().name("kallsyms".into()).stack_size(1 << 16).spawn(|| {
            let mut proc = File::open("/proc/kallsyms").ok()?;
            let mut file = crate::vdso::memory_file(c"wallclock-kallsyms")?;
            std::io::copy(&mut proc, &mut file).ok()?;
            Some(file)
        });
        reading.map(Kallsyms::Reading).unwrap_or_default()
    }

    /// The path of the copy (once it is read), if there is one.
    pub(crate) fn path(&mut self) -> Option<&Path> {
        if let Kallsyms::Reading(_) = self {
            let Kallsyms::Reading(t) = std::mem::take(self) else { unreachable!() };
            let file = t.join().ok().flatten();
            *self = Kallsyms::Read(file.map(|f| (crate::vdso::path_of(&f), f)));
        }
        match self {
            Kallsyms::Read(Some((path, _))) => Some(path),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The copy reads as /proc/kallsyms does (the same symbols; their
    /// count may change between reads as modules come and go).
    #[test]
    fn the_copy_reads_as_proc_kallsyms() {
        let mut k = Kallsyms::start();
        let copy = std::fs::read_to_string(k.path().expect("a copy")).unwrap();
        let first = |t: &str| t.lines().next().map(str::to_string);
        let proc = std::fs::read_to_string("/proc/kallsyms").unwrap();
        assert_eq!(first(&copy), first(&proc));
        assert!(copy.lines().count() > 1000);
        assert!(k.path().is_some(), "and again");
    }
}
