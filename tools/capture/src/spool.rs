//! Records written out during a capture instead of held until the stop:
//! framed in the binary encoding (wallclock_stream::binary) into an
//! unlinked file in the temporary directory, and read back one at a time
//! as the stop writes the output. What a capture holds in memory is then
//! bounded by what is alive, not by how long it runs (a system-wide
//! capture of a parallel build sees 300 processes exit a second, each
//! with its Maps record and its threads' stack records).

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Seek, Write};

use wallclock_stream::{binary, Record};

pub struct Spool {
    w: BufWriter<File>,
    /// Records written.
    n: u64,
    buf: Vec<u8>,
}

impl Spool {
    /// A new spool in `$TMPDIR` (default /tmp), unlinked from the start.
    pub fn new() -> io::Result<Spool> {
        let dir = std::env::temp_dir();
        let file = tempfile::tempfile_in(&dir).map_err(|e| io::Error::new(e.kind(), format!("a spool file in {} (TMPDIR): {e}", dir.display())))?;
        Ok(Spool { w: BufWriter::with_capacity(1 << 16, file), n: 0, buf: Vec::new() })
    }

    pub fn push(&mut self, r: &Record) -> io::Result<()> {
        self.buf.clear();
        binary::encode_record(r, &mut self.buf)?;
        self.w.write_all(&self.buf)?;
        self.n += 1;
        Ok(())
    }

    /// The records written, read back from the first.
    pub fn read(self) -> io::Result<Spooled> {
        let mut file = self.w.into_inner().map_err(|e| e.into_error())?;
        file.rewind()?;
        Ok(Spooled { r: BufReader::new(file), left: self.n, buf: self.buf })
    }
}

/// A spool's records, read back one at a time.
pub struct Spooled {
    r: BufReader<File>,
    left: u64,
    buf: Vec<u8>,
}

impl Iterator for Spooled {
    type Item = io::Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let mut version = binary::VERSION;
        match binary::read_record(&mut self.r, &mut self.buf, &mut version) {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => Some(Err(io::Error::other("a spool file ended early"))),
            Err(e) => Some(Err(io::Error::other(format!("reading a spool file: {e}")))),
        }
    }
}
