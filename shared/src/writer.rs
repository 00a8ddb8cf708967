//! Writing the stream: one JSON record per line, or the binary framing
//! (see [`crate::binary`]) when asked for.
//!
//! Every tool that writes the stream builds its writer with
//! [`Writer::from_env`], so one setting chooses the framing for a whole
//! pipeline: `WALLCLOCK_STREAM_FORMAT=json` (the default) or `bincode`.

use std::fmt;
use std::io::{self, Write};

use crate::binary;
use crate::record::{FrameDef, Record, Stack, StackDef};
use crate::table::StackTable;

/// The environment variable that chooses what [`Writer::from_env`] writes.
pub const FORMAT_ENV: &str = "WALLCLOCK_STREAM_FORMAT";

/// The framing of a written stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// One JSON object per line.
    #[default]
    Json,
    /// The magic, then length-prefixed bincode records.
    Bincode,
}

impl Format {
    /// `json` or `bincode`.
    pub fn parse(s: &str) -> Option<Format> {
        match s.trim() {
            "json" => Some(Format::Json),
            "bincode" => Some(Format::Bincode),
            _ => None,
        }
    }

    /// What [`FORMAT_ENV`] asks for: unset or empty is JSON, anything
    /// unknown an error (a typo must not silently write the other format).
    pub fn from_env() -> io::Result<Format> {
        match std::env::var(FORMAT_ENV) {
            Err(std::env::VarError::NotPresent) => Ok(Format::Json),
            Ok(v) if v.trim().is_empty() => Ok(Format::Json),
            Ok(v) => Format::parse(&v).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("{FORMAT_ENV}={v:?}: expected json or bincode"))
            }),
            Err(e) => Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{FORMAT_ENV}: {e}"))),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Json => "json",
            Format::Bincode => "bincode",
        })
    }
}

pub struct Writer<W: Write> {
    out: W,
    format: Format,
    /// Binary: the magic is written before the first record, so a stream
    /// with no record stays empty, as in JSON.
    started: bool,
    buf: Vec<u8>,
    /// What of a [`StackTable`] this output has defined already.
    defined: Defined,
}

/// Ids of a [`StackTable`] already defined in the output, for the table's
/// generation.
#[derive(Default)]
struct Defined {
    generation: u64,
    frames: Vec<bool>,
    stacks: Vec<bool>,
}

fn mark(v: &mut Vec<bool>, id: u32) -> bool {
    let i = id as usize;
    if i >= v.len() {
        v.resize(i + 1, false);
    }
    !std::mem::replace(&mut v[i], true)
}

impl<W: Write> Writer<W> {
    /// A JSON writer.
    pub fn new(out: W) -> Self {
        Self::with_format(out, Format::Json)
    }

    pub fn with_format(out: W, format: Format) -> Self {
        Writer { out, format, started: false, buf: Vec::new(), defined: Defined::default() }
    }

    /// A writer of the format [`FORMAT_ENV`] asks for (JSON by default).
    pub fn from_env(out: W) -> io::Result<Self> {
        Ok(Self::with_format(out, Format::from_env()?))
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn write(&mut self, rec: &Record) -> io::Result<()> {
        match self.format {
            Format::Json => {
                serde_json::to_writer(&mut self.out, rec).map_err(io::Error::from)?;
                self.out.write_all(b"\n")
            }
            Format::Bincode => {
                self.buf.clear();
                if !self.started {
                    self.buf.extend_from_slice(&binary::magic());
                    self.started = true;
                }
                binary::encode_record(rec, &mut self.buf)?;
                self.out.write_all(&self.buf)
            }
        }
    }

    /// Write `s` with its frames as stack `id` of `table`: the frames and
    /// the stack are defined (frame and stackdef records) before their
    /// first use in this output, then the record carries `stack_id` and no
    /// frames. `s.frames` is ignored.
    pub fn write_stack_in(&mut self, mut s: Stack, table: &StackTable, id: u32) -> io::Result<()> {
        let d = &mut self.defined;
        if d.generation != table.generation() {
            *d = Defined { generation: table.generation(), ..Defined::default() };
        }
        if mark(&mut self.defined.stacks, id) {
            let frames = table.stack(id);
            for &f in frames {
                if mark(&mut self.defined.frames, f) {
                    self.write(&Record::Frame(FrameDef { id: f, frame: table.frame(f).clone() }))?;
                }
            }
            self.write(&Record::StackDef(StackDef { id, frames: frames.to_vec() }))?;
        }
        s.frames = Vec::new();
        s.stack_id = Some(id);
        self.write(&Record::Stack(s))
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The output, to write more to it directly.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}
