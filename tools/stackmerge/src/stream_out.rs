//! Writing the merged stream: header, threads, maps, then each stack
//! record after the definitions of its frames and stack, then the stats.
//!
//! The bulk (200k stacks and their 200k stackdefs after 1M records, 44 MB)
//! is formatted here into large buffers, each stack from its small key
//! and each stackdef from the frame ids' digits made once: a record and a
//! thread name per stack, and a record, a buffer copy and a number
//! formatted digit by digit per frame id through the [`Writer`], were a
//! third of stackmerge's time after its input ended. Records of another
//! shape, and the binary framing, go through the [`Writer`] as before:
//! the bytes are the same.

use std::io::Write;

use anyhow::Result;
use wallclock_stream::firstuse::FirstUse;
use wallclock_stream::fastjson::{write_stack, write_u64};
use wallclock_stream::table::prefetch;
use wallclock_stream::{Format, FrameDef, Kind, Record, Stack, StackDef, StackTable, Writer};

use crate::order::{Item, Merged};

/// How many stacks ahead of the one written its frames are asked for.
const AHEAD: usize = 8;

/// Bytes gathered before they are handed to the output.
const CHUNK: usize = 1 << 20;

/// The stream; the threads, maps and stacks are taken out of `m` as they
/// are written.
pub fn write_stream(m: &mut Merged, out: &mut dyn Write) -> Result<()> {
    let mut w = Writer::from_env(out)?;
    w.write(&Record::Header(m.header.clone()))?;
    for t in std::mem::take(&mut m.threads).into_values() {
        w.write(&Record::Thread(t))?;
    }
    for mp in m.maps.drain(..) {
        w.write(&Record::Maps(mp))?;
    }
    let mut o = Out { w, json: Vec::new(), ids: Defined::default(), digits: Vec::new(), frames: Vec::new() };
    let json = o.w.format() == Format::Json;
    if json {
        o.json.reserve(CHUNK + 4096);
    }
    // One record, its fields set for each stack: no record or thread name
    // made per stack.
    let mut rec = Stack::new(Kind::On, 0, 0, "");
    let mut comm = u32::MAX;
    let mut items = std::mem::take(&mut m.items);
    // Stacks are read in the merged order, scattered in the table: asked
    // for ahead of their turn (their place, then their frames).
    let frames_at = |items: &[Item], i: usize| match items.get(i) {
        Some(Item::Named(n, _)) => Some(n.frames),
        Some(Item::Full(s)) => s.stack_id,
        None => None,
    };
    for i in 0..items.len() {
        if let Some(id) = frames_at(&items, i + 2 * AHEAD) {
            m.table.prefetch_place(id);
        }
        if let Some(id) = frames_at(&items, i + AHEAD) {
            m.table.prefetch_frames(id);
            if let Some(d) = o.ids.stacks.slot(id) {
                prefetch(d);
            }
        }
        match &mut items[i] {
            Item::Named(n, v) => {
                let id = o.define(&m.table, n.frames)?;
                if comm != n.comm {
                    comm = n.comm;
                    rec.comm.clear();
                    rec.comm.push_str(m.comms.name(n.comm));
                }
                (rec.kind, rec.state, rec.pid, rec.tid) = (n.kind, n.state, n.pid, n.tid);
                rec.pgen = (n.pgen > 0).then_some(n.pgen);
                (rec.stack_id, rec.ns, rec.count) = (Some(id), v.ns, v.count);
                if !m.lock_objects.is_empty() {
                    rec.object = m.lock_objects.get(&(n.pid, n.pgen, n.frames)).cloned();
                }
                o.stack(&rec, json)?;
            }
            Item::Full(s) => {
                let mut s = std::mem::replace(&mut **s, Stack::new(Kind::On, 0, 0, ""));
                if let Some(id) = s.stack_id {
                    s.stack_id = Some(o.define(&m.table, id)?);
                    s.frames = Vec::new();
                }
                o.stack(&s, json)?;
            }
        }
    }
    o.flush()?;
    o.w.write(&Record::Stats(m.stats.clone()))?;
    Ok(())
}

struct Out<'a> {
    w: Writer<&'a mut dyn Write>,
    /// JSON lines not yet handed to the output.
    json: Vec<u8>,
    ids: Defined,
    /// Output frame id -> its decimal digits, made once.
    digits: Vec<([u8; 10], u8)>,
    /// The output frame ids of the stack being defined.
    frames: Vec<u32>,
}

impl Out<'_> {
    fn flush(&mut self) -> Result<()> {
        if !self.json.is_empty() {
            self.w.get_mut().write_all(&self.json)?;
            self.json.clear();
        }
        Ok(())
    }

    /// A record through the [`Writer`], after what is gathered.
    fn record(&mut self, r: &Record) -> Result<()> {
        self.flush()?;
        Ok(self.w.write(r)?)
    }

    fn stack(&mut self, s: &Stack, json: bool) -> Result<()> {
        if json && write_stack(&mut self.json, s) {
            self.json.push(b'\n');
            if self.json.len() >= CHUNK {
                self.flush()?;
            }
            return Ok(());
        }
        self.record(&Record::Stack(s.clone()))
    }

    /// The output id of table stack `id`, defined (its new frames, then
    /// itself) before its first use.
    fn define(&mut self, table: &StackTable, id: u32) -> Result<u32> {
        let (out, new) = self.ids.stacks.number(id);
        if !new {
            return Ok(out);
        }
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        for &f in table.stack(id) {
            let (out_f, new) = self.ids.frames.number(f);
            if new {
                self.record(&Record::Frame(FrameDef { id: out_f, frame: table.frame(f).clone() }))?;
                let mut text = Vec::new();
                write_u64(&mut text, u64::from(out_f));
                let mut d = ([0u8; 10], text.len() as u8);
                d.0[..text.len()].copy_from_slice(&text);
                self.digits.push(d);
            }
            frames.push(out_f);
        }
        if self.w.format() != Format::Json {
            self.record(&Record::StackDef(StackDef { id: out, frames }))?;
            return Ok(out);
        }
        // As serde writes it: {"type":"stackdef","id":ID,"frames":[...]}
        let b = &mut self.json;
        b.extend_from_slice(br#"{"type":"stackdef","id":"#);
        write_u64(b, u64::from(out));
        b.extend_from_slice(br#","frames":["#);
        for (i, &f) in frames.iter().enumerate() {
            if i > 0 {
                b.push(b',');
            }
            let (d, n) = &self.digits[f as usize];
            b.extend_from_slice(&d[..*n as usize]);
        }
        b.extend_from_slice(b"]}\n");
        self.frames = frames;
        Ok(out)
    }
}

/// The table's frames and stacks defined in the output so far, numbered
/// in the order of their first use, as [`Writer::write_stack_in`] numbers
/// them (the same records make the same bytes, whatever the table's ids).
#[derive(Default)]
struct Defined {
    frames: FirstUse,
    stacks: FirstUse,
}
