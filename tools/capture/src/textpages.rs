//! The bytes of code that the leaf scan (unwind.rs) looks at: the few
//! bytes before each word of a stack copy that points into a file's
//! .text, to tell a return address from a stale value. Read from the file
//! a page at a time (pread) into a small cache, not through the file's
//! mapping: the kernel maps 16 pages around each page touched there, and
//! the scans of rustc's deep stacks made 21 MB of librustc_driver's code
//! resident in 20 s (cc1's, 7 MB).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::elf::Bytes;

/// A file's .text.
#[derive(Clone)]
pub enum Text {
    /// In a file: the file, the section's offset in it and its length.
    File(Arc<File>, u64, u64),
    /// Held in memory (the vDSO's copy).
    Mem(Bytes),
}

impl Text {
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn len(&self) -> u64 {
        match self {
            Text::File(_, _, n) => *n,
            Text::Mem(b) => b.len() as u64,
        }
    }
}

const PAGE: u64 = 4096;
/// Pages kept at most (1 MB): the scans of one stack look at a few dozen.
const PAGES_MAX: usize = 256;

/// Pages of the files' code read so far, by file and page index.
#[derive(Default)]
pub struct Pages {
    pages: HashMap<(usize, u64), Box<[u8]>>,
}

impl Pages {
    /// The byte at offset `i` of `t`.
    pub fn byte(&mut self, t: &Text, i: u64) -> Option<u8> {
        let (f, off, len) = match t {
            Text::Mem(b) => return b.get(usize::try_from(i).ok()?).copied(),
            Text::File(f, off, len) => (f, *off, *len),
        };
        if i >= len {
            return None;
        }
        let at = off + i;
        let key = (Arc::as_ptr(f) as usize, at / PAGE);
        if !self.pages.contains_key(&key) {
            if self.pages.len() >= PAGES_MAX {
                self.pages.clear();
            }
            let mut buf = vec![0u8; PAGE as usize];
            let n = f.read_at(&mut buf, key.1 * PAGE).ok()?;
            buf.truncate(n);
            self.pages.insert(key, buf.into());
        }
        self.pages[&key].get((at % PAGE) as usize).copied()
    }
}
