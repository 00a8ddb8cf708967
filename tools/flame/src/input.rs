//! Reading inputs: the wallclock stream (JSON records), plain folded lines
//! and `perf script` output, aggregated by stack.
//!
//! Plain folded input takes a fast path ([`crate::folded_read`]: blocks of
//! lines, a key allocated only for a new stack); everything else goes
//! through the shared [`Reader`].

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Cursor, Read};
use std::path::PathBuf;

use anyhow::{Context, Result};
use wallclock_stream::pgen::process_key;
use wallclock_stream::sniff::{self, InputKind};
use wallclock_stream::{folded, Frame, Header, Kind, Reader, ReaderOptions, Record, Stack};

pub use crate::kinds::{kind_index, Mix, GPU, OFF, ON, OTHER};
pub use crate::folded_line::{parse_folded, Value, FRACTION_SCALE};
pub use wallclock_stream::fasthash::{FastHash, FxHasher};

/// What a thread is called in per-thread output.
#[derive(Debug, Clone, Default)]
pub struct ThreadName {
    pub pid: u32,
    pub comm: String,
    pub role: Option<String>,
}

/// All stacks of the inputs, aggregated.
#[derive(Default)]
pub struct Profile {
    /// Stream stacks: (tid, or 0 unless split per thread; pid; folded
    /// stack as an id of [`Profile::text`]) -> ns by kind.
    pub stream: crate::stream_stacks::StreamStacks,
    /// Each stream stack as names (see [`crate::seqs`]), made once per
    /// distinct stack; its folded text only where asked for.
    pub seqs: crate::seqs::Seqs,
    /// Texts made from a record's own frames or addresses -> their id (a
    /// raw stream repeats them record after record).
    text_ids: HashMap<String, u32, FastHash>,
    /// Folded and perf-script stacks -> raw values by kind.
    pub folded: HashMap<String, Mix, FastHash>,
    /// The same, from plain folded files past their first line.
    pub folded_lines: crate::stack_table::StackTable,
    /// Threads seen (Thread records, else the stacks' pid and comm).
    pub threads: BTreeMap<u32, ThreadName>,
    /// Each process's name: its main thread's (the name after exec), else
    /// the first stack's comm.
    pub processes: BTreeMap<u32, String>,
    /// The streams' headers, merged (pids, command, window, tools).
    pub header: Option<Header>,
    /// A folded line carried a `_[c]`/`_[o]`/`_[g]` marker.
    pub markers: bool,
    /// Plain folded input was read (values in an unknown unit).
    pub plain: bool,
    /// `perf script` of a cpu-clock/task-clock event: periods are ns.
    pub perf_clock: bool,
    /// Folded values are in 1/`fraction` units: [`FRACTION_SCALE`] once
    /// a fractional count was read (0 or 1: whole units).
    pub fraction: u64,
    /// Two-count (difffolded) lines: each stack's BEFORE count (its AFTER
    /// count is its value), in the same units.
    pub before: HashMap<String, u64, FastHash>,
}

impl Profile {
    /// The folded text of stream stack `id` (a key of [`Profile::stream`]).
    pub fn text(&self, id: u32) -> String {
        self.seqs.text(id)
    }

    fn text_id(&mut self, text: String) -> u32 {
        match self.text_ids.get(&text) {
            Some(&id) => id,
            None => {
                let id = self.seqs.push_text(&text);
                self.text_ids.insert(text, id);
                id
            }
        }
    }

    /// No stack at all was read.
    pub fn is_empty(&self) -> bool {
        self.stream.is_empty() && !self.has_folded()
    }

    /// Folded values to 1/`to` units (to: [`FRACTION_SCALE`] or 1), so
    /// that two profiles (flame --diff) count alike.
    pub fn set_fraction(&mut self, to: u64) {
        if to > self.fraction.max(1) {
            let by = to / self.fraction.max(1);
            self.rescale(to);
            self.folded_lines.scale(by);
            for b in self.before.values_mut() {
                *b = b.saturating_mul(by);
            }
        }
    }

    /// Folded (or perf script) stacks were read.
    pub fn has_folded(&self) -> bool {
        !self.folded.is_empty() || !self.folded_lines.is_empty()
    }

    /// Every folded stack and its raw values by kind.
    pub fn folded_stacks(&self) -> impl Iterator<Item = (&str, Mix)> + '_ {
        self.folded.iter().map(|(k, m)| (k.as_str(), *m)).chain(self.folded_lines.iter())
    }

    /// Read every input of `paths` (stdin when none or `-`).
    pub fn read(paths: &[PathBuf], per_thread: bool, stream_folded_unit_ns: u64) -> Result<Profile> {
        let mut p = Profile::default();
        for path in wallclock_stream::cli::inputs_or_stdin(paths) {
            let (name, r) = wallclock_stream::cli::open_input(&path)?;
            p.add(r, &name, per_thread, stream_folded_unit_ns)?;
        }
        Ok(p)
    }

    /// Add one input: its first line says whether it is a stream (JSON),
    /// folded lines, or `perf script` output. `per_thread` keys stream
    /// stacks by tid.
    pub fn add(&mut self, mut r: impl BufRead, name: &str, per_thread: bool, stream_folded_unit_ns: u64) -> Result<()> {
        // The binary framing is the stream.
        let head = r.fill_buf().with_context(|| format!("cannot read {name}"))?;
        if sniff::sniff(head) == InputKind::Binary {
            return self.add_stream(r, name, per_thread, stream_folded_unit_ns);
        }
        // Skip to the first meaningful line, keeping what was read.
        let mut head = Vec::new();
        let mut line_no = 0;
        let (first, kind) = loop {
            let at = head.len();
            if r.read_until(b'\n', &mut head).with_context(|| format!("cannot read {name}"))? == 0 {
                return Ok(());
            }
            line_no += 1;
            let l = String::from_utf8_lossy(&head[at..]).trim().to_string();
            let kind = sniff::sniff_line(&l);
            if kind != InputKind::Empty {
                break (l, kind);
            }
        };
        match kind {
            InputKind::Stream => {
                return self.add_stream(Cursor::new(head).chain(r), name, per_thread, stream_folded_unit_ns)
            }
            InputKind::Folded => {
                self.plain = true;
                self.add_folded_line(&first, name, line_no)?;
                return self.add_folded(r, name, line_no);
            }
            _ => {}
        }
        // perf script output (or garbage: the reader names the line).
        self.perf_clock |= first.ends_with("cpu-clock:") || first.ends_with("task-clock:");
        let opts = ReaderOptions { folded_unit_ns: 1 };
        for rec in Reader::new(Cursor::new(head).chain(r), name, opts) {
            if let Record::Stack(s) = rec? {
                if s.count > 0 {
                    self.folded.entry(stack_text(&s)).or_default()[kind_index(s.kind)] += s.count * self.fraction.max(1);
                }
            }
        }
        Ok(())
    }

    fn add_folded(&mut self, r: impl BufRead, name: &str, line_no: usize) -> Result<()> {
        let mut f = crate::folded_read::Folded {
            table: std::mem::take(&mut self.folded_lines),
            markers: self.markers,
            scale: self.fraction.max(1),
            before: std::mem::take(&mut self.before),
        };
        let res = crate::folded_read::read(r, name, line_no, &mut f);
        if f.scale != self.fraction.max(1) {
            self.rescale(f.scale);
        }
        (self.folded_lines, self.markers, self.before) = (f.table, f.markers, f.before);
        res
    }

    /// A first fractional count: every folded value so far (the table's
    /// are already done) to thousandths.
    fn rescale(&mut self, to: u64) {
        let by = to / self.fraction.max(1);
        self.fraction = to;
        for mix in self.folded.values_mut() {
            *mix = mix.map(|v| v.saturating_mul(by));
        }
    }

    fn add_folded_line(&mut self, line: &str, name: &str, line_no: usize) -> Result<()> {
        let (stack, value, kind) =
            parse_folded(line).map_err(|m| anyhow::anyhow!("{name}: line {line_no}: {m}"))?;
        if kind != OTHER {
            self.markers = true;
        }
        if value.fractional() && self.fraction.max(1) < FRACTION_SCALE {
            self.rescale(FRACTION_SCALE);
            for b in self.before.values_mut() {
                *b = b.saturating_mul(FRACTION_SCALE);
            }
            self.folded_lines.scale(FRACTION_SCALE);
        }
        let scale = self.fraction.max(1);
        if let Some(b) = value.before_at(scale) {
            *self.before.entry(stack.to_string()).or_default() += b;
        }
        let value = value.at(scale);
        if value > 0 {
            match self.folded.get_mut(stack.as_ref()) {
                Some(mix) => mix[kind] += value,
                None => self.folded.entry(stack.into_owned()).or_default()[kind] += value,
            }
        }
        Ok(())
    }

    fn add_stream(&mut self, r: impl BufRead, name: &str, per_thread: bool, unit_ns: u64) -> Result<()> {
        let opts = ReaderOptions { folded_unit_ns: unit_ns };
        // Stacks of the stream's stack table: their text made from the
        // table's frames, not from frames copied into every record.
        let mut reader = Reader::new(r, name, opts).keep_stack_ids().skip_named_addresses();
        // Each table stack's names made once (and its frames' once):
        // (stack id, state leaf) -> stack id of `seqs`, for the table's
        // current definitions.
        let mut frame_names = wallclock_stream::idmap::IdMap::<u32>::default();
        // By stack id, each leaf's (u32::MAX: not made yet): a merged
        // stream's stack ids come in order, each new, so a hash map lookup
        // per record only ever missed.
        let mut by_stack = wallclock_stream::idmap::IdMap::<[u32; 5]>::default();
        let mut generation = reader.defs().generation();
        while let Some(rec) = reader.next() {
            match rec? {
                Record::Header(h) => {
                    if let Some(had) = self.header.as_ref().filter(|had| had.event != h.event) {
                        let says = |e: &Option<String>| e.as_ref().map_or("time".to_string(), |e| format!("{e} (oncputime -e)"));
                        anyhow::bail!("{name} counts {}, the input before it {}: they do not add up", says(&h.event), says(&had.event));
                    }
                    merge_header(&mut self.header, h)
                }
                // A later process of a reused pid (`pgen`) is a process of
                // its own: keyed by wallclock_stream::pgen::process_key.
                Record::Thread(t) => {
                    let pid = process_key(t.pid, t.pgen);
                    if t.tid == t.pid && !t.comm.is_empty() {
                        self.processes.insert(pid, t.comm.clone());
                    }
                    self.threads.insert(t.tid, ThreadName { pid, comm: t.comm, role: t.role });
                }
                Record::Stack(s) => {
                    let pid = process_key(s.pid, s.pgen);
                    if s.pid != 0 && !s.comm.is_empty() {
                        self.processes.entry(pid).or_insert_with(|| s.comm.clone());
                    }
                    self.threads.entry(s.tid).or_insert_with(|| ThreadName {
                        pid,
                        comm: s.comm.clone(),
                        role: None,
                    });
                    if s.ns == 0 {
                        continue;
                    }
                    let tid = if per_thread { s.tid } else { 0 };
                    let defs = reader.defs();
                    let text = match s.stack_id {
                        Some(id) if defs.stack(id).is_some_and(|f| !f.is_empty()) => {
                            if generation != defs.generation() {
                                generation = defs.generation();
                                by_stack = Default::default();
                                frame_names = Default::default();
                            }
                            let leaf = match (s.kind, s.state) {
                                (Kind::Off, Some(st)) => st as u8 + 1,
                                _ => 0,
                            };
                            match by_stack.get(id).map(|t| t[leaf as usize]).filter(|&t| t != u32::MAX) {
                                Some(t) => t,
                                None => {
                                    let ids = defs.stack(id).unwrap_or_default();
                                    let t = table_seq(&mut self.seqs, &mut frame_names, defs, ids, &s);
                                    match by_stack.get_mut(id) {
                                        Some(ts) => ts[leaf as usize] = t,
                                        None => {
                                            let mut ts = [u32::MAX; 5];
                                            ts[leaf as usize] = t;
                                            by_stack.insert(id, ts);
                                        }
                                    }
                                    t
                                }
                            }
                        }
                        _ => self.text_id(stack_text(&s)),
                    };
                    self.stream.add(tid, pid, text, kind_index(s.kind), s.ns);
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The names of table stack `ids` (each frame's text made once, in
/// `cache`) as [`folded::FrameTexts::stack_text`] writes them, then the
/// state leaf as [`with_state_leaf`] adds it: the same text, split.
fn table_seq(seqs: &mut crate::seqs::Seqs, cache: &mut wallclock_stream::idmap::IdMap<u32>, defs: &wallclock_stream::Defs, ids: &[u32], s: &Stack) -> u32 {
    let mut names: Vec<u32> = Vec::with_capacity(ids.len() + 1);
    for &f in ids {
        let n = match cache.get(f) {
            Some(&n) => n,
            None => {
                let n = seqs.intern(&defs.frame(f).map(folded::frame_text).unwrap_or_default());
                cache.insert(f, n);
                n
            }
        };
        // That text leaves out the `;` after empty leading names.
        if !(names.is_empty() && seqs.name(n).is_empty()) {
            names.push(n);
        }
    }
    if names.is_empty() {
        names.push(seqs.intern("[no frames]"));
    }
    let tail: Vec<&str> =
        ids[ids.len().saturating_sub(2)..].iter().filter_map(|&f| defs.frame(f)).map(|f| f.func.as_str()).collect();
    if let (Kind::Off, Some(st)) = (s.kind, s.state) {
        if !wallclock_stream::accounting::ends_in_state_leaf(&tail) {
            names.push(seqs.intern(st.leaf_name()));
            if let Some(o) = &s.object {
                names.push(seqs.intern(&folded::escape(&wallclock_stream::accounting::object_frame(o))));
            }
        }
    }
    seqs.push(names)
}

/// The folded text of a stack record: its frames when symbolized, else its
/// raw addresses in hex (user root first, then kernel with `_[k]`). An
/// off-CPU stack whose frames do not end in a state leaf gets one, so
/// runnable, sleeping and I/O time stay apart.
pub fn stack_text(s: &Stack) -> String {
    let out = folded::stack_text::<&str>(&[], &folded::frames_or_addresses(s));
    with_state_leaf(s, out, &s.frames)
}

/// `text` of an off-CPU stack whose frames do not end in a state leaf,
/// with one (and its object's frame after it).
fn with_state_leaf(s: &Stack, mut text: String, frames: &[Frame]) -> String {
    if let (Kind::Off, Some(st)) = (s.kind, s.state) {
        let tail: Vec<&str> = frames[frames.len().saturating_sub(2)..].iter().map(|f| f.func.as_str()).collect();
        if !wallclock_stream::accounting::ends_in_state_leaf(&tail) {
            text.push(';');
            text.push_str(st.leaf_name());
            if let Some(o) = &s.object {
                text.push(';');
                text.push_str(&folded::escape(&wallclock_stream::accounting::object_frame(o)));
            }
        }
    }
    text
}

/// Fold one more stream header into what the graph covers.
pub fn merge_header(into: &mut Option<Header>, h: Header) {
    let Some(a) = into else {
        *into = Some(h);
        return;
    };
    for p in h.pids {
        if !a.pids.contains(&p) {
            a.pids.push(p);
        }
    }
    a.command = a.command.take().or(h.command);
    a.event = a.event.take().or(h.event);
    a.start_ns = [a.start_ns, h.start_ns].into_iter().flatten().min();
    a.end_ns = [a.end_ns, h.end_ns].into_iter().flatten().max();
    if !a.tool.split('+').any(|t| t == h.tool) {
        a.tool = format!("{}+{}", a.tool, h.tool);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wallclock_stream::State;

    #[test]
    fn raw_addresses_and_state_leaf() {
        let mut s = Stack::new(Kind::Off, 1, 2, "x");
        s.state = Some(State::D);
        s.ustack = vec![0x401000, 0x401234];
        s.kstack = vec![0xffffffff81000000];
        assert_eq!(stack_text(&s), "0x401000;0x401234;0xffffffff81000000_[k];[io]");
    }
}
