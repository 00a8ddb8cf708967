//! Writing the stream: one JSON record per line, or the binary framing
//! (see [`crate::binary`]) when asked for.
//!
//! Every tool that writes the stream builds its writer with
//! [`Writer::from_env`], so one setting chooses the framing for a whole
//! pipeline: `WALLCLOCK_STREAM_FORMAT=json` (the default) or `bincode`.

use std::fmt;
use std::io::{self, Write};

use crate::binary;
use crate::fastjson;
use crate::firstuse::FirstUse;
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

/// The ids of a [`StackTable`] (of one generation) defined in the output.
/// The output numbers frames and stacks in the order of their first use,
/// whatever the table's ids: the same records make the same bytes, however
/// the producer found them (a stream symbolized again, merged again).
#[derive(Default)]
struct Defined {
    generation: u64,
    frames: FirstUse,
    /// Stacks, once [`Defined::renumbered`].
    stacks: FirstUse,
    /// Stacks met in the table's order so far.
    in_order: u32,
    /// Whether a stack came out of its table's order. Until then each
    /// stack's output id is its table id (a table numbers stacks as they
    /// are first met, stacksym's in the order they are written), and
    /// `stacks` is not looked at: looking up 1M ids in it, 800 KB for
    /// 200k stacks, was a twentieth of stacksym's run.
    renumbered: bool,
}

impl Defined {
    /// The output id of the table's stack `id`, and whether it is new.
    fn stack(&mut self, id: u32) -> (u32, bool) {
        if !self.renumbered {
            if id < self.in_order {
                return (id, false);
            }
            if id == self.in_order {
                self.in_order += 1;
                return (id, true);
            }
            self.renumbered = true;
            self.stacks = FirstUse::in_order(self.in_order);
        }
        self.stacks.number(id)
    }
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
                // Into our buffer first: serde writes a token at a time,
                // and the output is often a `dyn Write`. The records of a
                // stream's bulk by hand ([`crate::fastjson`], the same bytes).
                self.buf.clear();
                let done = match rec {
                    Record::Stack(s) => fastjson::write_stack(&mut self.buf, s),
                    Record::StackDef(d) => {
                        fastjson::write_stackdef(&mut self.buf, d.id, &d.frames);
                        true
                    }
                    _ => false,
                };
                if !done {
                    serde_json::to_writer(&mut self.buf, rec).map_err(io::Error::from)?;
                }
                self.buf.push(b'\n');
                self.out.write_all(&self.buf)
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
        self.write_stack_lists_in(&mut s, table, id, None)
    }

    /// [`Writer::write_stack_in`] for a record the caller keeps (to read
    /// into again: its `frames` are emptied, its `stack_id` set), its
    /// address lists copied from `lists` where given (the text of
    /// `s.ustack` and `s.kstack` as read: see
    /// [`fastjson::write_stack_lists`]).
    pub fn write_stack_lists_in(
        &mut self,
        s: &mut Stack,
        table: &StackTable,
        id: u32,
        lists: Option<(&[u8], &[u8])>,
    ) -> io::Result<()> {
        let d = &mut self.defined;
        if d.generation != table.generation() {
            *d = Defined { generation: table.generation(), ..Defined::default() };
        }
        let (out_id, new) = d.stack(id);
        if new {
            let mut ids = Vec::with_capacity(table.stack(id).len());
            for &f in table.stack(id) {
                let d = &mut self.defined;
                let (out_f, new) = d.frames.number(f);
                if new {
                    self.write(&Record::Frame(FrameDef { id: out_f, frame: table.frame(f).clone() }))?;
                }
                ids.push(out_f);
            }
            self.write(&Record::StackDef(StackDef { id: out_id, frames: ids }))?;
        }
        s.frames.clear();
        s.stack_id = Some(out_id);
        if self.format == Format::Json {
            self.buf.clear();
            if fastjson::write_stack_lists(&mut self.buf, s, lists) {
                self.buf.push(b'\n');
                return self.out.write_all(&self.buf);
            }
        }
        // Serde's or bincode's: the record lent to a `Record` and back.
        let rec = Record::Stack(std::mem::replace(s, Stack::new(crate::Kind::Other, 0, 0, "")));
        let res = self.write(&rec);
        if let Record::Stack(back) = rec {
            *s = back;
        }
        res
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Stack ids come out numbered by first use, in table order or not,
    /// as the plain lookup numbers them.
    #[test]
    fn stacks_numbered_by_first_use() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for seq in 0..200u32 {
            let (mut d, mut table_next) = (Defined::default(), 0u32);
            let mut plain = FirstUse::default();
            for _ in 0..300 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Mostly old ids or the next new one in order; now and
                // then (more often in later sequences) one out of order.
                let id = match x % (400 - u64::from(seq)) {
                    0 => table_next + 1 + (x >> 20) as u32 % 5,
                    1..=80 => table_next,
                    _ => (x >> 32) as u32 % (table_next + 1),
                };
                table_next = table_next.max(id + 1);
                assert_eq!(d.stack(id), plain.number(id), "sequence {seq}");
            }
        }
    }
}
