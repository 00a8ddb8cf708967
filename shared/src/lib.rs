//! The wallclock stack-event stream.
//!
//! Every wallclock tool reads and writes one line-delimited stream: one JSON
//! object per line, each with a `"type"` field. The first record is a
//! [`Header`]; then any mix of [`Thread`], [`Maps`] and [`Stack`] records
//! (and in a symbolized stream the stack table's definitions, see
//! [`table`]); last a [`Stats`] trailer. Time is integer nanoseconds on
//! `CLOCK_MONOTONIC` throughout. Plain folded lines (`a;b;c 123`) are
//! accepted wherever a stream is read (see [`folded`]), and so is the
//! binary framing of the same records ([`binary`]), which writers produce
//! when `WALLCLOCK_STREAM_FORMAT=bincode` (see [`writer::Format`]).
//!
//! ```text
//! {"type":"header","format":"wallclock","version":"1.0","tool":"offcputime",...}
//! {"type":"thread","pid":42,"tid":43,"comm":"worker","on_ns":1200000,...}
//! {"type":"stack","kind":"off","state":"S","pid":42,"tid":43,"comm":"worker","ustack":[...],"ns":5000000,"count":5}
//! {"type":"stats","end_ns":...,"counts":{"short_blocks":3}}
//! ```
//!
//! The full specification is `man/wallclock-stream.5`; keep it in step with
//! this crate. Where each part of the format lives, one file each:
//! folded text and its escaping rule [`folded`], what an input is
//! [`sniff`], `/proc/PID/maps` [`procmaps`], the fast hash map
//! [`fasthash`], maps keyed by the stream's ids [`idmap`], names that are not text
//! [`names`].

pub mod accounting;
mod addrs;
pub mod background;
pub mod binary;
pub mod cli;
pub mod clocks;
pub mod cruntime;
pub mod fasthash;
pub mod fastjson;
pub mod firstuse;
pub mod folded;
pub mod idmap;
mod ksyms;
pub mod locks;
mod legacy;
pub mod names;
pub mod perfscript;
pub mod pgen;
pub mod procmaps;
pub mod reader;
pub mod safe_open;
mod record;
pub mod probe;
pub mod sniff;
pub mod spellings;
mod state;
pub mod table;
pub mod units;
pub mod writer;

pub use reader::{ParseError, Reader, ReaderOptions};
pub use record::*;
pub use probe::{ProbeEvent, Span};
pub use ksyms::{Ksym, Ksyms, BPF_MODULE};
pub use table::{Defs, StackTable};
pub use writer::{Format, Writer};
