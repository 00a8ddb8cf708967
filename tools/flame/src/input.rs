//! Reading inputs: the wallclock stream (JSON records), plain folded lines
//! and `perf script` output, aggregated by stack.
//!
//! Plain folded input takes a fast path ([`crate::folded_read`]: blocks of
//! lines, a key allocated only for a new stack); everything else goes
//! through the shared [`Reader`].

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Cursor, Read};
use std::path::PathBuf;

use anyhow::{Context, Result};
use wallclock_stream::sniff::{self, InputKind};
use wallclock_stream::{folded, Frame, Header, Kind, Reader, ReaderOptions, Record, Stack, State};

/// Kinds, as indexes into a [`Mix`].
pub const ON: usize = 0;
pub const OFF: usize = 1;
pub const GPU: usize = 2;
pub const OTHER: usize = 3;

/// Time (or samples) of one stack or frame box, split by kind.
pub type Mix = [u64; 4];

pub fn kind_index(k: Kind) -> usize {
    match k {
        Kind::On => ON,
        Kind::Off => OFF,
        Kind::Gpu => GPU,
        Kind::Other => OTHER,
    }
}

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
    pub stream: HashMap<(u32, u32, u32), Mix, FastHash>,
    /// The folded text of each stream stack, made once per distinct stack.
    texts: Vec<String>,
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
    pub fn text(&self, id: u32) -> &str {
        &self.texts[id as usize]
    }

    fn new_text(&mut self, text: String) -> u32 {
        self.texts.push(text);
        (self.texts.len() - 1) as u32
    }

    fn text_id(&mut self, text: String) -> u32 {
        match self.text_ids.get(&text) {
            Some(&id) => id,
            None => {
                let id = self.new_text(text.clone());
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
        let mut reader = Reader::new(r, name, opts).keep_stack_ids();
        // Each table stack's text made once (and its frames' once): (stack
        // id, state leaf) -> text id, for the table's current definitions.
        let mut frame_texts = folded::FrameTexts::default();
        let mut by_stack: HashMap<(u32, u8), u32, FastHash> = HashMap::default();
        let mut generation = reader.defs().generation();
        while let Some(rec) = reader.next() {
            match rec? {
                Record::Header(h) => crate::title::merge_header(&mut self.header, h),
                Record::Thread(t) => {
                    if t.tid == t.pid && !t.comm.is_empty() {
                        self.processes.insert(t.pid, t.comm.clone());
                    }
                    self.threads.insert(t.tid, ThreadName { pid: t.pid, comm: t.comm, role: t.role });
                }
                Record::Stack(s) => {
                    if s.pid != 0 && !s.comm.is_empty() {
                        self.processes.entry(s.pid).or_insert_with(|| s.comm.clone());
                    }
                    self.threads.entry(s.tid).or_insert_with(|| ThreadName {
                        pid: s.pid,
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
                                by_stack.clear();
                            }
                            let leaf = match (s.kind, s.state) {
                                (Kind::Off, Some(st)) => st as u8 + 1,
                                _ => 0,
                            };
                            match by_stack.get(&(id, leaf)) {
                                Some(&t) => t,
                                None => {
                                    let ids = defs.stack(id).unwrap_or_default();
                                    let body = frame_texts.stack_text(defs, ids);
                                    let t = self.new_text(with_state_leaf(&s, body, ids.last().and_then(|&f| defs.frame(f))));
                                    by_stack.insert((id, leaf), t);
                                    t
                                }
                            }
                        }
                        _ => self.text_id(stack_text(&s)),
                    };
                    self.stream.entry((tid, s.pid, text)).or_default()[kind_index(s.kind)] += s.ns;
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The folded text of a stack record: its frames when symbolized, else its
/// raw addresses in hex (user root first, then kernel with `_[k]`). An
/// off-CPU stack whose frames do not end in a state leaf gets one, so
/// runnable, sleeping and I/O time stay apart.
pub fn stack_text(s: &Stack) -> String {
    let out = folded::stack_text::<&str>(&[], &folded::frames_or_addresses(s));
    with_state_leaf(s, out, s.frames.last())
}

/// `text` of an off-CPU stack whose frames (ending in `last`) do not end
/// in a state leaf, with one.
fn with_state_leaf(s: &Stack, mut text: String, last: Option<&Frame>) -> String {
    if let (Kind::Off, Some(st)) = (s.kind, s.state) {
        if last.is_none_or(|f| State::from_leaf_name(&f.func).is_none()) {
            text.push(';');
            text.push_str(st.leaf_name());
        }
    }
    text
}

const KIND_MARKERS: [(&str, usize); 3] = [("_[c]", ON), ("_[o]", OFF), ("_[g]", GPU)];

/// Units of a value in thousandths, once an input has a fractional count.
pub const FRACTION_SCALE: u64 = 1000;

/// A folded line's value as written: its whole part and thousandths
/// (flamegraph.pl keeps fractional counts; inferno truncates them), and
/// on a two-count (difffolded) line the BEFORE count.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Value {
    pub whole: u64,
    pub milli: u64,
    pub before: Option<(u64, u64)>,
}

impl Value {
    /// Has a fractional part (not `.0`).
    pub fn fractional(&self) -> bool {
        self.milli != 0 || self.before.is_some_and(|(_, m)| m != 0)
    }

    /// The value in 1/`scale` units (`scale` 1 or [`FRACTION_SCALE`]).
    pub fn at(&self, scale: u64) -> u64 {
        scaled(self.whole, self.milli, scale)
    }

    /// BEFORE in 1/`scale` units.
    pub fn before_at(&self, scale: u64) -> Option<u64> {
        self.before.map(|(w, m)| scaled(w, m, scale))
    }
}

fn scaled(whole: u64, milli: u64, scale: u64) -> u64 {
    whole.saturating_mul(scale).saturating_add(milli * scale / FRACTION_SCALE)
}

/// `123`, `1.5`, `6.` -> (whole, thousandths), rounded to the nearest thousandth.
fn exact_value(text: &str) -> Option<(u64, u64)> {
    let (w, f) = text.split_once('.').unwrap_or((text, ""));
    if w.is_empty() && f.is_empty() || !w.bytes().chain(f.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole: u64 = if w.is_empty() { 0 } else { w.parse().ok()? };
    let digits: String = f.chars().chain("000".chars()).take(4).collect();
    let four: u64 = digits.parse().ok()?;
    let milli = (four + 5) / 10;
    Some(if milli == FRACTION_SCALE { (whole.saturating_add(1), 0) } else { (whole, milli) })
}

/// One folded line -> (stack without kind marker, value, kind), borrowing
/// the stack text whenever the marker is a plain suffix.
pub fn parse_folded(line: &str) -> Result<(Cow<'_, str>, Value, usize), String> {
    let (stack, _) = folded::split_line(line)?;
    let text = line.trim_end();
    let value_text = text.rsplit_once([' ', '\t']).map_or(text, |(_, v)| v);
    let (whole, milli) = exact_value(value_text)
        .ok_or_else(|| format!("expected a number at the end of a folded line, found {value_text:?}"))?;
    let mut value = Value { whole, milli, before: None };
    // difffolded.pl's `stack BEFORE AFTER`: a second number before the
    // value (a name ending in a number would need a marker or a `;`).
    let mut stack = stack;
    if let Some((rest, b)) = stack.rsplit_once([' ', '\t']) {
        let rest = rest.trim_end();
        if let (Some(before), false) = (exact_value(b), rest.is_empty()) {
            value.before = Some(before);
            stack = rest;
        }
    }
    let (stack, kind) = strip_marker(line, stack)?;
    Ok((stack, value, kind))
}

fn strip_marker<'a>(line: &str, stack: &'a str) -> Result<(Cow<'a, str>, usize), String> {
    // One scan for `_[c]`, `_[o]`, `_[g]` anywhere (three scans were 8% of flame's run).
    let b = stack.as_bytes();
    let mut markers = stack
        .match_indices('[')
        .map(|(i, _)| i.wrapping_sub(1))
        .filter(|&i| i < b.len() && b[i] == b'_' && matches!(b.get(i + 2..i + 4), Some([b'c' | b'o' | b'g', b']'])))
        .map(|i| (i, ()));
    match (markers.next(), markers.next()) {
        (None, _) => return Ok((Cow::Borrowed(stack), OTHER)),
        (Some((i, _)), None) if i + 4 == stack.len() => {
            let k = KIND_MARKERS.iter().find(|(m, _)| stack.ends_with(m)).map_or(OTHER, |&(_, k)| k);
            return Ok((Cow::Borrowed(&stack[..i]), k));
        }
        // A block and its waker (stackmerge --wakers): the block's leaf
        // holds the marker; the waker's frames after `--` are `_[w]`.
        (Some((i, _)), None) if stack[i..].starts_with("_[o];--;") => {
            let mut text = String::with_capacity(stack.len());
            text.push_str(&stack[..i]);
            text.push_str(&stack[i + 4..]);
            return Ok((Cow::Owned(text), OFF));
        }
        _ => {}
    }
    // A marker elsewhere (`leaf_[o]_[k]`, or not on the leaf): the shared parser decides.
    let s = folded::parse_line(&format!("{stack} 0"), 1).map_err(|e| format!("{e} (in {line:?})"))?;
    let text: Vec<String> = s.frames.iter().map(folded::frame_text).collect();
    Ok((Cow::Owned(text.join(";")), kind_index(s.kind)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_stripped_and_borrowed() {
        let (s, v, k) = parse_folded("a;b;[sleep]_[o] 12").unwrap();
        assert_eq!((s.as_ref(), v.at(1), k), ("a;b;[sleep]", 12, OFF));
        assert!(matches!(s, Cow::Borrowed(_)));
        let (s, _, k) = parse_folded("a;write_[o]_[k] 3").unwrap();
        assert_eq!((s.as_ref(), k), ("a;write_[k]", OFF));
        let (s, _, k) = parse_folded("a;b_[k] 3").unwrap();
        assert_eq!((s.as_ref(), k), ("a;b_[k]", OTHER));
        assert!(parse_folded("a;b").is_err());
        assert!(parse_folded("a;b x").is_err());
        // stackmerge --wakers: the block's marker before `--`, the waker after.
        let (s, _, k) = parse_folded("a;read;[sleep]_[o];--;write_[w];main_[w];w (9)_[w] 5").unwrap();
        assert_eq!((s.as_ref(), k), ("a;read;[sleep];--;write_[w];main_[w];w (9)_[w]", OFF));
    }

    #[test]
    fn fractions_and_two_counts() {
        let (s, v, _) = parse_folded("noploop;[unknown] 2.567").unwrap();
        assert_eq!((s.as_ref(), v.fractional(), v.at(1), v.at(FRACTION_SCALE)), ("noploop;[unknown]", true, 2, 2567));
        let (_, v, _) = parse_folded("a 6.").unwrap();
        assert!(!v.fractional());
        let (s, v, _) = parse_folded("main;f 274 415").unwrap();
        assert_eq!((s.as_ref(), v.before_at(1), v.at(1)), ("main;f", Some(274), 415));
        let (s, v, _) = parse_folded("main 415").unwrap();
        assert_eq!((s.as_ref(), v.before), ("main", None));
        assert!(parse_folded("a;b 1e5").is_err());
    }

    #[test]
    fn raw_addresses_and_state_leaf() {
        let mut s = Stack::new(Kind::Off, 1, 2, "x");
        s.state = Some(State::D);
        s.ustack = vec![0x401000, 0x401234];
        s.kstack = vec![0xffffffff81000000];
        assert_eq!(stack_text(&s), "0x401000;0x401234;0xffffffff81000000_[k];[io]");
    }
}
