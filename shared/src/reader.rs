//! Reading the stream. Each line is a JSON record (it starts with `{`) or a
//! plain folded line; `perf script` output is recognised on its first line
//! and collapsed (as `stackcollapse-perf.pl --all` would) before reading.
//! Input that starts with a NUL byte is the binary framing
//! ([`crate::binary`]): the same records, numbered instead of lines.

use std::fmt;
use std::io::{BufRead, Cursor};

use crate::binary;
use crate::fastjson::{AddrText, ListSpans};
use crate::folded;
use crate::record::{Kind, Record, Stack, FORMAT_NAME, VERSION_MAJOR, VERSION_MINOR};
use crate::table::Defs;

/// How to read input that is not JSON records.
#[derive(Debug, Clone, Copy)]
pub struct ReaderOptions {
    /// ns per unit of a folded line's value. Default 1000: folded values are
    /// microseconds, as bcc `offcputime -f` and `stackmerge --folded` write.
    pub folded_unit_ns: u64,
}

impl Default for ReaderOptions {
    fn default() -> Self {
        ReaderOptions { folded_unit_ns: 1_000 }
    }
}

/// A bad line: where and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ParseError {
    /// Input name (file path, or `<stdin>`).
    pub source_name: String,
    /// 1-based line number (record number in a binary stream).
    pub line: usize,
    pub msg: String,
    /// `line` counts the records of a binary stream: shown as `record N`.
    pub binary: bool,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = if self.binary { "record" } else { "line" };
        if self.source_name.is_empty() {
            write!(f, "{unit} {}: {}", self.line, self.msg)
        } else {
            write!(f, "{}: {unit} {}: {}", self.source_name, self.line, self.msg)
        }
    }
}

/// Iterator over the records of one input.
pub struct Reader<R: BufRead> {
    inner: R,
    name: String,
    opts: ReaderOptions,
    line_no: usize,
    buf: Vec<u8>,
    /// Set once the input turned out to be `perf script` output.
    collapsed: Option<Cursor<Vec<u8>>>,
    seen_data: bool,
    /// The input turned out to be the binary framing.
    binary: bool,
    /// A broken binary framing: nothing more can be read.
    done: bool,
    /// The binary framing's version (see [`binary::read_magic`]).
    bin_version: u8,
    /// The stack table read so far.
    defs: Defs,
    /// Return stack records with their `stack_id` instead of their frames.
    keep_ids: bool,
    /// Leave out the addresses of stack records named by a stack of the table.
    skip_named_addrs: bool,
    /// Warnings already given (each once per input).
    warned_newer: bool,
    warned_waker: bool,
    /// Unknown record types already warned about.
    unknown: Vec<String>,
    /// The address lists' text, with [`Reader::keep_address_text`].
    text: Option<AddrText>,
}


impl<R: BufRead> Reader<R> {
    pub fn new(inner: R, name: &str, opts: ReaderOptions) -> Self {
        Reader {
            inner,
            name: name.to_string(),
            opts,
            line_no: 0,
            buf: Vec::new(),
            collapsed: None,
            seen_data: false,
            binary: false,
            done: false,
            bin_version: binary::VERSION,
            defs: Defs::default(),
            keep_ids: false,
            skip_named_addrs: false,
            warned_newer: false,
            warned_waker: false,
            unknown: Vec::new(),
            text: None,
        }
    }

    /// Keep the text of each stack record's address lists as it was read,
    /// to be written back as is ([`Reader::address_text`]).
    pub fn keep_address_text(mut self) -> Self {
        self.text = Some(AddrText::default());
        self
    }

    /// With [`Reader::keep_address_text`]: the address lists of the
    /// records returned since it was last cleared, one entry per record.
    pub fn address_text(&mut self) -> Option<&mut AddrText> {
        self.text.as_mut()
    }

    /// Return stack records of the stack table as they come, `stack_id`
    /// set and `frames` empty (checked: the id is defined); their frames
    /// are in [`Reader::defs`]. For tools that aggregate by stack and look
    /// at each distinct stack once, instead of copying its frames into
    /// every record.
    pub fn keep_stack_ids(mut self) -> Self {
        self.keep_ids = true;
        self
    }

    /// With [`Reader::keep_stack_ids`]: a stack record whose `stack_id`
    /// names a stack of frames comes without its `ustack` and `kstack`
    /// (still checked as the rest of the line), for tools that draw and
    /// merge a stack by its frames and never look at its addresses:
    /// reading them was most of the reading of `stacksym`'s output.
    pub fn skip_named_addresses(mut self) -> Self {
        self.skip_named_addrs = true;
        self
    }

    /// The stack table's definitions read so far.
    pub fn defs(&self) -> &Defs {
        &self.defs
    }

    /// Take in the stack table's definitions (`None`: nothing to return)
    /// and resolve a stack's `stack_id` unless asked to keep it.
    fn settle(&mut self, rec: Record) -> Option<Result<Record, ParseError>> {
        match rec {
            Record::Frame(d) => {
                self.defs.define_frame(d);
                None
            }
            Record::StackDef(d) => self.defs.define_stack(d).err().map(|m| Err(self.err(m))),
            Record::Stack(mut s) => Some(self.settle_stack(&mut s).map(|()| Record::Stack(s))),
            r => Some(Ok(r)),
        }
    }

    /// A stack record's `stack_id` checked, and resolved to its frames
    /// unless asked to keep it.
    fn settle_stack(&mut self, s: &mut Stack) -> Result<(), ParseError> {
        let Some(id) = s.stack_id else { return Ok(()) };
        if !s.frames.is_empty() {
            return Err(self.err(format!("stack record has both frames and stack_id {id}")));
        }
        if self.keep_ids {
            if !self.defs.has_stack(id) {
                return Err(self.err(format!("stack_id {id}: no stackdef record before it defines it")));
            }
        } else {
            match self.defs.frames(id) {
                Some(f) => s.frames = f,
                None => return Err(self.err(format!("stack_id {id}: no stackdef record before it defines it"))),
            }
            s.stack_id = None;
        }
        Ok(())
    }

    /// The next record (as [`Iterator::next`] reads it) into `slot`: a
    /// plain stack record that lies whole in the input's buffer is read
    /// into the stack record `slot` holds, its allocations reused and
    /// nothing moved (moving each 360-byte record from the reader to the
    /// tool's chunk, and its stack back to be read into again, was a
    /// twelfth of stacksym's run; allocating its lists, a tenth); any
    /// other record is put in `slot`. `None` at the end of the input.
    pub fn next_into(&mut self, slot: &mut Record) -> Option<Result<(), ParseError>> {
        if let Some(t) = &mut self.text {
            t.unstage();
        }
        if !self.done && !self.binary && self.collapsed.is_none() && !self.at_binary() {
            if !matches!(slot, Record::Stack(_)) {
                *slot = Record::Stack(Stack::new(Kind::Other, 0, 0, ""));
            }
            let Record::Stack(s) = slot else { unreachable!("made a stack record above") };
            if self.stack_in_place(s) {
                self.line_no += 1;
                self.seen_data = true;
                // What [`Reader::vet`] checks of such a record: it has
                // no frames, GPU name or waker.
                crate::names::check_in_place(&mut s.comm);
                let res = self.settle_stack(s);
                if let (Ok(()), Some(t)) = (&res, &mut self.text) {
                    t.commit();
                }
                return Some(res);
            }
        }
        let res = self.next()?;
        Some(res.map(|r| *slot = r))
    }

    /// What a reader of this version can say about a record it read: a
    /// newer minor version (its new fields are skipped), a waker without
    /// an off-CPU block to belong to (dropped; the record's time stays).
    /// Every name is checked ([`crate::names`]).
    fn vet(&mut self, mut rec: Record) -> Record {
        // Names that are not printable text are marked here, once for
        // every tool (a frame of the stack table: once per stream).
        crate::names::check_record(&mut rec);
        match &mut rec {
            Record::Header(h) if !self.warned_newer && newer_minor(&h.version) => {
                self.warned_newer = true;
                eprintln!(
                    "warning: {}: stream version {} is newer than this reader's {VERSION_MAJOR}.{VERSION_MINOR}: fields it does not know are skipped",
                    self.name, h.version
                );
            }
            Record::Stack(s) if s.waker.is_some() && s.kind != Kind::Off => {
                s.waker = None;
                if !self.warned_waker {
                    self.warned_waker = true;
                    eprintln!(
                        "warning: {}: {} {}: a waker on a stack record of kind {} (wakers belong to off-CPU blocks): waker ignored, the stack kept",
                        self.name,
                        if self.binary { "record" } else { "line" },
                        self.line_no,
                        format!("{:?}", s.kind).to_lowercase()
                    );
                }
            }
            _ => {}
        }
        rec
    }

    fn err(&self, msg: impl Into<String>) -> ParseError {
        ParseError { source_name: self.name.clone(), line: self.line_no, msg: msg.into(), binary: self.binary }
    }

    /// Does a binary stream start here (at a line start of the raw input)?
    fn at_binary(&mut self) -> bool {
        self.collapsed.is_none() && self.inner.fill_buf().is_ok_and(binary::starts_binary)
    }

    /// Switch to the binary framing: check its magic; records count from 1.
    /// A bad magic after text lines is named as the next line.
    fn start_binary(&mut self) -> Result<(), ParseError> {
        let lines = self.line_no;
        self.binary = true;
        self.line_no = 0;
        binary::read_magic(&mut self.inner).map(|v| self.bin_version = v).map_err(|e| {
            self.done = true;
            self.binary = lines == 0;
            self.line_no = lines + 1;
            self.err(e)
        })
    }

    fn next_binary(&mut self) -> Option<Result<Record, ParseError>> {
        let res = binary::read_record(&mut self.inner, &mut self.buf, &mut self.bin_version);
        self.line_no += 1;
        match res {
            Ok(None) => None,
            Ok(Some(rec)) => {
                if let Record::Header(h) = &rec {
                    if let Err(m) = check_header(&h.format, &h.version) {
                        self.done = true;
                        return Some(Err(self.err(m)));
                    }
                }
                Some(Ok(self.vet(rec)))
            }
            // Unlike a bad line, a bad record leaves no sure place to go
            // on from (its length may be what is corrupt): stop there.
            Err(m) => {
                self.done = true;
                Some(Err(self.err(m)))
            }
        }
    }

    /// A record's object without its `type` (see [`fast_object`]): a
    /// plain stack or stackdef record by hand ([`crate::fastjson`]), the
    /// rest by serde.
    fn parse_fast(&mut self, obj: &str, which: usize) -> Result<Record, ParseError> {
        let whole = |end: usize| end == obj.len();
        if which == STACKDEF {
            if let Some((d, _)) = crate::fastjson::parse_stackdef(obj.as_bytes()).filter(|(_, e)| whole(*e)) {
                return Ok(Record::StackDef(d));
            }
        }
        if which == STACK {
            let b = obj.as_bytes();
            let skip = self.keep_ids && self.skip_named_addrs;
            let mut s = Stack::new(Kind::Other, 0, 0, "");
            if let Some((_, spans)) = fast_stack(b, &self.defs, skip, &mut s).filter(|(e, _)| whole(*e)) {
                if let Some(t) = &mut self.text {
                    t.stage(b, &spans);
                }
                return Ok(Record::Stack(s));
            }
        }
        (FAST[which].1)(obj).map_err(|e| self.err(format!("invalid record: {e}")))
    }

    /// A plain stack or stackdef record that lies whole in the input's
    /// buffer, read there, with no copy of its line: `None` (nothing
    /// consumed) for anything else, read line by line as before. Copying
    /// each line out was a tenth of reading `stacksym`'s output.
    fn in_place(&mut self) -> Option<Record> {
        let mut s = Stack::new(Kind::Other, 0, 0, "");
        if self.stack_in_place(&mut s) {
            return Some(Record::Stack(s));
        }
        let b = self.inner.fill_buf().ok()?;
        if !b.starts_with(FAST[STACKDEF].0) {
            return None;
        }
        let at = FAST[STACKDEF].0.len() - 1;
        let (d, end) = crate::fastjson::parse_stackdef(&b[at..])?;
        let next = line_end(b, at + end)?;
        self.inner.consume(next);
        Some(Record::StackDef(d))
    }

    /// [`Reader::in_place`] for a plain stack record, read into `s`
    /// (anything in `s` when there is none: `false`, nothing consumed).
    fn stack_in_place(&mut self, s: &mut Stack) -> bool {
        let Ok(b) = self.inner.fill_buf() else { return false };
        if !b.starts_with(FAST[STACK].0) {
            return false;
        }
        let at = FAST[STACK].0.len() - 1;
        let skip = self.keep_ids && self.skip_named_addrs;
        let Some((end, spans)) = fast_stack(&b[at..], &self.defs, skip, s) else { return false };
        let Some(next) = line_end(b, at + end) else { return false };
        if let Some(t) = &mut self.text {
            t.stage(&b[at..], &spans);
        }
        self.inner.consume(next);
        true
    }

    fn parse(&mut self, line: &str) -> Result<Record, ParseError> {
        if line.starts_with('{') {
            let rec: Record = serde_json::from_str(line)
                .map_err(|e| self.err(format!("invalid record: {e}")))?;
            if let Record::Header(h) = &rec {
                check_header(&h.format, &h.version).map_err(|m| self.err(m))?;
            }
            return Ok(rec);
        }
        folded::parse_line(line, self.opts.folded_unit_ns).map(Record::Stack).map_err(|m| self.err(m))
    }

    /// The first data line is neither JSON nor folded: is it `perf script`?
    /// A sample that cannot be collapsed is an error naming its line.
    fn try_perf_script(&mut self, first: &[u8]) -> Result<bool, ParseError> {
        let text = String::from_utf8_lossy(first);
        if !crate::sniff::is_perf_sample_header(&text) {
            return Ok(false);
        }
        let mut all = first.to_vec();
        if let Err(e) = self.inner.read_to_end(&mut all) {
            return Err(self.err(format!("read error: {e}")));
        }
        let before = self.line_no - 1;
        let out = crate::perfscript::collapse(&all).map_err(|b| {
            self.line_no = before + b.line;
            self.done = true;
            self.err(b.msg)
        })?;
        // Collapsed values are summed sample periods: ns for perf's
        // cpu-clock and task-clock events, not the folded default unit.
        self.opts.folded_unit_ns = 1;
        // Line numbers now refer to the collapsed lines.
        self.name = format!("{} (perf script, collapsed)", self.name);
        self.line_no = 0;
        self.collapsed = Some(Cursor::new(out));
        Ok(true)
    }
}

/// A stream of this major version with a newer minor one.
fn newer_minor(version: &str) -> bool {
    let mut it = version.split('.').map(|p| p.parse::<u32>().ok());
    matches!((it.next(), it.next()), (Some(Some(VERSION_MAJOR)), Some(Some(m))) if m > VERSION_MINOR)
}

impl<R: BufRead> Reader<R> {
    /// A JSON record of a type this reader does not know (from a newer
    /// minor version: `slice` came in 1.3) is skipped, with one warning
    /// per type, so that older tools keep reading newer streams.
    fn skip_unknown(&mut self, line: &str) -> bool {
        if !line.starts_with('{') {
            return false;
        }
        let Ok(serde_json::Value::Object(o)) = serde_json::from_str::<serde_json::Value>(line) else { return false };
        let Some(t) = o.get("type").and_then(|t| t.as_str()) else { return false };
        if KNOWN_TYPES.contains(&t) {
            return false;
        }
        if !self.unknown.iter().any(|u| u == t) {
            let at = if self.name.is_empty() { String::new() } else { format!("{}: ", self.name) };
            eprintln!(
                "warning: {at}line {}: skipping records of unknown type {t:?} (a newer stream version?)",
                self.line_no
            );
            self.unknown.push(t.to_string());
        }
        true
    }
}

/// A plain stack record by [`crate::fastjson::parse_stack_into`] into `s`,
/// its addresses left out with `skip` where the table names it; the index
/// after it and where its address lists lie.
fn fast_stack(b: &[u8], defs: &Defs, skip: bool, s: &mut Stack) -> Option<(usize, ListSpans)> {
    let named = |id: u32| defs.has_frames(id);
    crate::fastjson::parse_stack_into(b, skip.then_some(&named as &dyn Fn(u32) -> bool), s)
}

/// The index after the line feed that must end a record read in place at
/// `b[..end]`, as a line the serde path trims would end.
fn line_end(b: &[u8], end: usize) -> Option<usize> {
    match b.get(end..end + 2) {
        Some([b'\n', _]) => Some(end + 1),
        Some([b'\r', b'\n']) => Some(end + 2),
        _ => None,
    }
}

/// How a record's object without its `type` is read.
type ParseFn = fn(&str) -> serde_json::Result<Record>;

/// The records read without serde's tagged-enum path: the prefix our
/// writers give each (`type` first), and how to read the rest. A plain
/// stack record ([`STACK`]) is read by hand first.
const STACK: usize = 0;
const STACKDEF: usize = 1;
const FAST: [(&[u8], ParseFn); 3] = [
    (br#"{"type":"stack","#, |o| serde_json::from_str(o).map(Record::Stack)),
    (br#"{"type":"stackdef","#, |o| serde_json::from_str(o).map(Record::StackDef)),
    (br#"{"type":"frame","#, |o| serde_json::from_str(o).map(Record::Frame)),
];

/// A line that is a stack, stackdef or frame record as our writers write
/// it, as the object of that record alone: its `{"type":"stack",` turned
/// into `{` in the line's own buffer, so that it is read as a [`Stack`]
/// directly, with no copy of the line. Through the internally tagged
/// Record, serde first copies every field into a buffer of its own (with
/// its allocations, a third of stackmerge's time on 1M records; the
/// stackdef and frame records of 200k stacks were a fifth of flame's).
///
/// [`Stack`]: crate::record::Stack
/// A line that is not UTF-8 is left as it is (read lossily elsewhere).
fn fast_object(line: &mut [u8]) -> Option<(&str, usize)> {
    let start = line.len() - line.trim_ascii_start().len();
    let line = &mut line[start..];
    let which = FAST.iter().position(|(p, _)| line.starts_with(p))?;
    let at = FAST[which].0.len() - 1;
    line[at] = b'{';
    if std::str::from_utf8(&line[at..]).is_err() {
        line[at] = b',';
        return None;
    }
    std::str::from_utf8(&line[at..]).ok().map(|o| (o.trim(), which))
}

/// The `type` of every record this reader knows.
/// A record of one of these that does not parse is an error naming its
/// line, never skipped as a newer stream's (a test checks the list against
/// the record types serde knows).
const KNOWN_TYPES: [&str; 12] =
    ["header", "thread", "maps", "stack", "stats", "frame", "stackdef", "slice", "slice_stack", "probe", "span", "ksyms"];

/// Reject streams this reader cannot understand.
pub fn check_header(format: &str, version: &str) -> Result<(), String> {
    if format != FORMAT_NAME {
        return Err(format!("not a {FORMAT_NAME} stream (format {format:?})"));
    }
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .ok_or_else(|| format!("bad stream version {version:?}"))?;
    if major > VERSION_MAJOR {
        return Err(format!(
            "stream version {version} is newer than this reader understands ({VERSION_MAJOR}.x); upgrade wallclock"
        ));
    }
    Ok(())
}

impl<R: BufRead> Iterator for Reader<R> {
    type Item = Result<Record, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(t) = &mut self.text {
                t.unstage();
            }
            match self.next_raw()? {
                Ok(rec) => {
                    if let Some(res) = self.settle(rec) {
                        if let (Ok(_), Some(t)) = (&res, &mut self.text) {
                            t.commit();
                        }
                        return Some(res);
                    }
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

impl<R: BufRead> Reader<R> {
    /// The next record as read, stack table definitions included.
    fn next_raw(&mut self) -> Option<Result<Record, ParseError>> {
        if self.done {
            return None;
        }
        if self.binary {
            return self.next_binary();
        }
        loop {
            if self.at_binary() {
                if let Err(e) = self.start_binary() {
                    return Some(Err(e));
                }
                return self.next_binary();
            }
            if self.collapsed.is_none() {
                if let Some(rec) = self.in_place() {
                    self.line_no += 1;
                    self.seen_data = true;
                    return Some(Ok(self.vet(rec)));
                }
            }
            self.buf.clear();
            let n = match self.collapsed.as_mut() {
                Some(c) => c.read_until(b'\n', &mut self.buf),
                None => self.inner.read_until(b'\n', &mut self.buf),
            };
            match n {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => return Some(Err(self.err(format!("read error: {e}")))),
            }
            self.line_no += 1;
            // A stack record of our writers is parsed where it was read
            // (no copy of the line; see [`fast_object`]).
            let mut buf = std::mem::take(&mut self.buf);
            let fast = fast_object(&mut buf).map(|(obj, which)| self.parse_fast(obj, which));
            self.buf = buf;
            if let Some(res) = fast {
                self.seen_data = true;
                return Some(res.map(|r| self.vet(r)));
            }
            // from_utf8 first: the lossy walk was a tenth of reading a stream.
            let line = match std::str::from_utf8(&self.buf) {
                Ok(t) => t.trim().to_string(),
                Err(_) => String::from_utf8_lossy(&self.buf).trim().to_string(),
            };
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let res = self.parse(&line);
            if res.is_err() && self.skip_unknown(&line) {
                continue;
            }
            if res.is_err() && !self.seen_data && self.collapsed.is_none() {
                let first = std::mem::take(&mut self.buf);
                match self.try_perf_script(&first) {
                    Ok(true) => continue,
                    Ok(false) => {}
                    Err(e) => return Some(Err(e)),
                }
            }
            self.seen_data = true;
            return Some(res.map(|r| self.vet(r)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Header, Kind};

    fn read(text: &str) -> Vec<Result<Record, ParseError>> {
        Reader::new(text.as_bytes(), "t", ReaderOptions::default()).collect()
    }

    #[test]
    fn mixed_json_and_folded() {
        let h = serde_json::to_string(&Record::Header(Header::new("x", "0"))).unwrap();
        let recs = read(&format!("{h}\n\na;b_[c] 3\n"));
        assert_eq!(recs.len(), 2);
        match &recs[1] {
            Ok(Record::Stack(s)) => assert_eq!((s.kind, s.count, s.ns), (Kind::On, 3, 3000)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn newer_major_rejected() {
        let recs = read(r#"{"type":"header","format":"wallclock","version":"2.0","tool":"x","tool_version":"0","clock":"monotonic"}"#);
        let e = recs[0].as_ref().unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.msg.contains("newer"), "{e}");
    }

    #[test]
    fn error_names_line() {
        let recs = read("a 1\nb 2\n{\"type\":\"stack\",\"pid\":\"x\"}\n");
        let e = recs[2].as_ref().unwrap_err();
        assert_eq!(e.to_string().split(':').take(2).collect::<Vec<_>>(), ["t", " line 3"]);
    }

    #[test]
    fn unknown_type_skipped() {
        let recs = read("{\"type\":\"bogus\",\"x\":1}\na 1\n{\"type\":\"bogus\"}\n");
        assert_eq!(recs.len(), 1, "{recs:?}");
        assert!(matches!(recs[0], Ok(Record::Stack(_))));
    }

    /// Every type serde reads is known here: a bad `probe` record (1.4)
    /// was skipped as "of unknown type", its line never named.
    #[test]
    fn every_record_type_is_known() {
        let e = serde_json::from_str::<Record>(r#"{"type":"zzz"}"#).unwrap_err().to_string();
        let listed: Vec<&str> = e.split('`').skip(3).step_by(2).collect();
        assert_eq!(listed.len(), KNOWN_TYPES.len(), "{e}");
        for t in listed {
            assert!(KNOWN_TYPES.contains(&t), "{t} missing from KNOWN_TYPES ({e})");
        }
        let h = serde_json::to_string(&Record::Header(Header::new("x", "0"))).unwrap();
        for t in ["probe", "span"] {
            let recs = read(&format!("{h}\n{{\"type\":\"{t}\",\"bogus\":1}}\n"));
            let e = recs[1].as_ref().unwrap_err();
            assert_eq!(e.line, 2, "{t}: {e}");
        }
    }

    /// `next_into` reads what `next` reads, whatever the slot held and
    /// whichever path reads the record; the kept text of each record's
    /// address lists is that record's, and records read by serde have none.
    #[test]
    fn next_into_reads_as_next_and_keeps_address_text() {
        let h = serde_json::to_string(&Record::Header(Header::new("x", "0"))).unwrap();
        let text = format!(
            "{h}\n{}\n{}\n{}\n\n{}\n{}\n{}\n{}\n",
            r#"{"type":"stack","kind":"on","ustack":[1,22],"kstack":[333],"pid":1,"comm":"a","ns":1,"count":1}"#,
            r#"{"type":"stack", "kind":"on","ustack":[4],"pid":1,"ns":1,"count":1}"#,
            r#"{"type":"stack","kind":"off","state":"S","kstack":[55,6],"pid":2,"ns":1,"count":1}"#,
            r#"{"type":"stack","kind":"off","ustack":[7],"ns":1,"count":1,"waker":{"context":"thread","pid":1,"tid":1}}"#,
            r#"{"type":"frame","id":0,"frame":{"func":"f"}}"#,
            r#"{"type":"stackdef","id":0,"frames":[0]}"#,
            r#"{"type":"stack","kind":"on","ustack":[9],"stack_id":0,"ns":1,"count":1}"#,
        );
        // Small buffers: records cut across them are read line by line.
        for cap in [8, 64, 1 << 16] {
            let input = || std::io::BufReader::with_capacity(cap, text.as_bytes());
            let want: Vec<Record> = Reader::new(input(), "t", ReaderOptions::default()).map(Result::unwrap).collect();
            let mut r = Reader::new(input(), "t", ReaderOptions::default()).keep_address_text();
            let mut old = Stack::new(Kind::Gpu, 9, 9, "old");
            old.ustack = vec![5; 30];
            old.frames = vec![crate::Frame::named("g")];
            let mut slots = [Record::Header(Header::new("y", "1")), Record::Stack(old)];
            let mut got = Vec::new();
            while let Some(res) = r.next_into(&mut slots[got.len() % 2]) {
                res.unwrap();
                got.push(slots[got.len() % 2].clone());
            }
            assert_eq!(got, want, "buffer of {cap}");
            let t = r.address_text().unwrap();
            let b = |x: &'static str| x.as_bytes();
            assert_eq!(t.get(0), None, "header");
            assert_eq!(t.get(1), Some((b("[1,22]"), b("[333]"))), "buffer of {cap}");
            assert_eq!(t.get(2), None, "read by serde");
            assert_eq!(t.get(3), Some((b(""), b("[55,6]"))), "buffer of {cap}");
            assert_eq!(t.get(4), None, "a waker: serde");
            assert_eq!(t.get(5), Some((b("[9]"), b(""))), "buffer of {cap}");
            assert_eq!(t.get(6), None);
            t.clear();
            assert_eq!(t.get(1), None);
        }
    }

    #[test]
    fn binary_after_text_and_truncated() {
        let h = Record::Header(Header::new("x", "0"));
        let mut w = crate::Writer::with_format(Vec::new(), crate::Format::Bincode);
        w.write(&h).unwrap();
        w.write(&h).unwrap();
        let bin = w.into_inner();
        let mut input = b"a;b_[c] 3\n".to_vec();
        input.extend_from_slice(&bin);
        let recs: Vec<_> = Reader::new(&input[..], "t", ReaderOptions::default()).collect();
        assert_eq!(recs.len(), 3, "{recs:?}");
        assert_eq!(recs[2].as_ref().unwrap(), &h);
        let cut = &bin[..bin.len() - 2];
        let recs: Vec<_> = Reader::new(cut, "t", ReaderOptions::default()).collect();
        assert_eq!(recs.len(), 2, "{recs:?}");
        let e = recs[1].as_ref().unwrap_err().to_string();
        assert!(e.starts_with("t: record 2: truncated"), "{e}");
    }

    #[test]
    fn perf_script() {
        let text = "dd 19315 [002]  98.465512:     250000 cpu-clock:\n\
                    \tffffffff8105f9f6 native_write_msr ([kernel.kallsyms])\n\
                    \t7f1a2b3c4d5e write (/lib/x86_64-linux-gnu/libc.so.6)\n\n";
        let recs = read(text);
        assert_eq!(recs.len(), 1, "{recs:?}");
        let Ok(Record::Stack(s)) = &recs[0] else { panic!("{recs:?}") };
        assert_eq!(s.frames.last().unwrap().func, "native_write_msr");
        assert_eq!(s.ns, 250_000, "a cpu-clock period is ns");
        assert!(s.frames.last().unwrap().kernel);
    }
}
