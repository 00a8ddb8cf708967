//! The mappings of processes: the stream's maps records, and what we read
//! of a process ourselves: `/proc/PID/maps` (for module names and offsets,
//! and as a snapshot should the process exit mid-stream) and
//! `/tmp/perf-PID.map` (JIT symbols, still readable after the process
//! exited; read as a file the process controls: [`PerfMap::load`]).
//! Mappings are kept as [`Mapping`]s, their strings shared.

use std::collections::HashSet;
use std::path::Path;
use std::rc::Rc;

use wallclock_stream::safe_open::{self, Owner, Skip};
use wallclock_stream::{MapEntry, Maps, Record};

use crate::engine::Engine;

/// A mapping of a process (a maps record's entry, or a line of
/// /proc/PID/maps), its file (path and build id) shared with every other
/// process that maps it: a system-wide capture has thousands of processes
/// mapping libc, and strings of their own for each mapping were 10 MB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    file: Rc<MappedFile>,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct MappedFile {
    /// Empty for anonymous memory.
    path: Rc<str>,
    build_id: Option<Rc<str>>,
}

impl Mapping {
    pub fn path(&self) -> &Rc<str> {
        &self.file.path
    }

    pub fn build_id(&self) -> Option<&Rc<str>> {
        self.file.build_id.as_ref()
    }
}

/// The files of mappings, each kept once.
#[derive(Debug, Default)]
pub struct Strings {
    strings: HashSet<Rc<str>>,
    files: HashSet<Rc<MappedFile>>,
}

impl Strings {
    pub fn get(&mut self, s: &str) -> Rc<str> {
        if let Some(r) = self.strings.get(s) {
            return r.clone();
        }
        let r: Rc<str> = s.into();
        self.strings.insert(r.clone());
        r
    }

    /// `e`, its path replaced by `path` when given.
    pub fn mapping(&mut self, e: &MapEntry, path: Option<&str>) -> Mapping {
        let file = MappedFile { path: self.get(path.unwrap_or(&e.path)), build_id: e.build_id.as_deref().map(|b| self.get(b)) };
        let file = match self.files.get(&file) {
            Some(f) => f.clone(),
            None => {
                let f = Rc::new(file);
                self.files.insert(f.clone());
                f
            }
        };
        Mapping { start: e.start, end: e.end, offset: e.offset, file }
    }
}

impl Engine {
    /// Remember a process's mappings; several records for one pid add up,
    /// the later winning where they overlap.
    pub fn add_maps(&mut self, m: &Maps) {
        let maps: Vec<Mapping> = m.maps.iter().map(|e| self.absolute(e)).collect();
        // The same record may come from two streams (`--maps`).
        let pid = crate::engine::space_key(m.pid, m.pgen);
        let known = self.stream_maps.entry(pid).or_default();
        for e in maps {
            if !known.contains(&e) {
                known.push(e);
            }
        }
        known.shrink_to_fit();
        if !m.names.is_empty() {
            self.named.entry(pid).or_default().extend(m.names.iter().map(|n| (n.addr, n.frame.clone())));
        }
    }

    /// A relative path (a hand-made or generated Maps record) is taken from
    /// the current directory, as a shell would; /proc never writes one.
    fn absolute(&mut self, e: &MapEntry) -> Mapping {
        if e.path.is_empty() || e.path.starts_with('/') || e.path.starts_with('[') {
            return self.strings.mapping(e, None);
        }
        match std::path::absolute(&e.path) {
            Ok(p) if p.exists() => self.strings.mapping(e, Some(&p.display().to_string())),
            _ => {
                self.warn(format!("{}: relative path in a maps record, not found from the current directory", e.path));
                self.strings.mapping(e, None)
            }
        }
    }

    /// Remember the maps records (and kernel symbols) among `records`.
    pub fn learn_maps(&mut self, records: &[Record]) {
        for r in records {
            match r {
                Record::Maps(m) => self.add_maps(m),
                Record::Ksyms(k) => self.add_ksyms(k),
                _ => {}
            }
        }
    }
}

/// Is `pid` a live process?
pub fn is_live(pid: u32) -> bool {
    pid != 0 && Path::new(&format!("/proc/{pid}/maps")).exists()
}

/// Every mapping of `pid` (anonymous ones with an empty path), or `None`
/// when the process is gone or unreadable.
pub fn read_proc_maps(pid: u32, strings: &mut Strings) -> Option<Vec<Mapping>> {
    Some(wallclock_stream::procmaps::read(pid)?.into_iter().map(|m| strings.mapping(&m.entry, None)).collect())
}

/// The mapping holding `addr`; later entries win (a newer Maps record).
pub fn find(maps: &[Mapping], addr: u64) -> Option<&Mapping> {
    find_idx(maps, addr).map(|i| &maps[i])
}

pub fn find_idx(maps: &[Mapping], addr: u64) -> Option<usize> {
    maps.iter().rposition(|m| m.start <= addr && addr < m.end)
}

/// A mapping backed by a file we can open (not `[vdso]`, not anonymous).
pub fn is_file(m: &Mapping) -> bool {
    m.path().starts_with('/') && !is_runtime_code(m.path())
}

/// A mapping named like a file that holds a runtime's generated code
/// (BEAM's `/memfd:vmem (deleted)`, opcache's `/dev/zero`): no file to
/// read symbols from (opened, it is not an ELF file, or not there), so
/// not one to warn about; its code is named by a perf map if any.
fn is_runtime_code(path: &str) -> bool {
    let p = path.strip_suffix(" (deleted)").unwrap_or(path);
    p == "/dev/zero" || p.starts_with("/memfd:") || p.starts_with("/SYSV") || p.starts_with("/anon_hugepage")
}

/// Symbols of a perf map file: `START SIZE NAME` per line, hex numbers.
#[derive(Debug, Default)]
pub struct PerfMap {
    /// Where it was read.
    pub path: String,
    /// Its length then (it changed when this differs).
    len: u64,
    /// (start, end, name), sorted by start.
    syms: Vec<(u64, u64, String)>,
    /// Skipped (a link, not a regular file, past a bound, stale): said.
    pub skipped: bool,
}

impl PerfMap {
    /// `/tmp/perf-PID.map`, if there is one: for a live process, the map
    /// it wrote in its own /tmp (a container's) under the pid it knows
    /// itself by, opened as a file the process controls
    /// ([`wallclock_stream::safe_open`]); a map older than the process is
    /// an earlier process's with the same pid. `Err` says why a map that
    /// is there was skipped (kept, without symbols, so that it is read
    /// again only when it changes).
    pub fn load(pid: u32) -> Result<Option<PerfMap>, (PerfMap, Skip)> {
        let (path, opened) = match ns_pid(pid) {
            Some(ns) => {
                let inside = format!("/tmp/perf-{ns}.map");
                (format!("/proc/{pid}/root{inside}"), safe_open::open_in_root(pid, &inside, safe_open::owner_of(pid)))
            }
            None => {
                let here = format!("/tmp/perf-{pid}.map");
                let f = safe_open::open(Path::new(&here), Owner::Unknown);
                (here, f)
            }
        };
        let skipped = |why: Skip| {
            let len = std::fs::symlink_metadata(&path).map_or(0, |m| m.len());
            (PerfMap { path: path.clone(), len, syms: Vec::new(), skipped: true }, why)
        };
        let file = match opened {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(None),
            Err(why) => return Err(skipped(why)),
        };
        if safe_open::older_than_process(&file, pid) == Some(true) {
            let why = format!("older than process {pid}: left by an earlier process with that pid");
            return Err(skipped(Skip { path: path.clone(), why }));
        }
        let mut syms: Vec<(u64, u64, String)> = Vec::new();
        let read = safe_open::for_each_line(Path::new(&path), &file, safe_open::PERF_MAP, |l| {
            // Bytes, not text: one name that is not UTF-8 (a JS function's
            // name cut at a write's edge) must not lose the whole map.
            let l = String::from_utf8_lossy(l);
            let mut it = l.trim().splitn(3, ' ');
            let parsed = (|| {
                let start = hex(it.next()?)?;
                let size = hex(it.next()?)?;
                Some((start, start.checked_add(size)?, it.next()?.trim().to_string()))
            })();
            syms.extend(parsed);
        });
        let len = match read {
            Ok(len) => len,
            Err(why) => return Err(skipped(why)),
        };
        // Later lines win over earlier ones for the same start (code regenerated).
        syms.reverse();
        syms.sort_by_key(|s| s.0);
        syms.dedup_by_key(|s| s.0);
        syms.shrink_to_fit();
        Ok(Some(PerfMap { len, path, syms, skipped: false }))
    }

    /// Has the file grown or shrunk since it was read? (Its link, when it
    /// is one: nothing is followed.)
    pub fn changed(&self) -> bool {
        std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.len() != self.len)
    }

    pub fn lookup(&self, addr: u64) -> Option<&str> {
        let i = self.syms.partition_point(|s| s.0 <= addr);
        let (start, end, name) = self.syms.get(i.checked_sub(1)?)?;
        (*start <= addr && addr < *end).then_some(name.as_str())
    }
}

/// The pid a live process knows itself by (in its pid namespace).
fn ns_pid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find(|l| l.starts_with("NSpid:"))?.split_whitespace().last()?.parse().ok()
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_is_not_a_file() {
        let anon = wallclock_stream::procmaps::parse_line("7f0000000000-7f0000001000 rwxp 00000000 00:00 0 ").unwrap();
        assert!(!is_file(&Strings::default().mapping(&anon.entry, None)));
        for p in ["/memfd:vmem (deleted)", "/dev/zero (deleted)", "/SYSV00000000 (deleted)"] {
            let jit = wallclock_stream::MapEntry { path: p.into(), ..anon.entry.clone() };
            assert!(!is_file(&Strings::default().mapping(&jit, None)), "{p}");
        }
    }

    #[test]
    fn perf_map_lookup() {
        let pm = PerfMap { path: String::new(), len: 0, syms: vec![(0x1000, 0x1010, "a".into()), (0x2000, 0x2100, "b c".into())], skipped: false };
        assert_eq!(pm.lookup(0x1000), Some("a"));
        assert_eq!(pm.lookup(0x100f), Some("a"));
        assert_eq!(pm.lookup(0x1010), None);
        assert_eq!(pm.lookup(0x20ff), Some("b c"));
        assert_eq!(pm.lookup(0xfff), None);
    }
}
