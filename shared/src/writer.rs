//! Writing the stream: one JSON record per line.

use std::io::{self, Write};

use crate::record::Record;

pub struct Writer<W: Write> {
    out: W,
}

impl<W: Write> Writer<W> {
    pub fn new(out: W) -> Self {
        Writer { out }
    }

    pub fn write(&mut self, rec: &Record) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, rec).map_err(io::Error::from)?;
        self.out.write_all(b"\n")
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}
