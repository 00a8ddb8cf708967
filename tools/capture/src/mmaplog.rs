//! The mappings of every process as the kernel made them, from its own
//! records (perf's PERF_RECORD_MMAP2, COMM with the exec flag, FORK and
//! EXIT, on a dummy software event per CPU), as `perf record` learns
//! them: each comes when the mapping is made, with its time.
//!
//! Reading /proc/PID/maps when a stack event is handled came too late for
//! a build's short processes: the event waits in the queue while the
//! process execs, maps libc, runs and exits, and its maps were then read
//! before the loader had mapped libc (an `as` whose record held itself
//! and libbfd, not libc), of the next image, or not at all (the process
//! gone): 3,300 of a 30 s capture's build processes had stacks cut short
//! and their libc frames unnamed. Here the maps of a process at the time
//! of a stack are those it had made by then, since its last exec.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use wallclock_stream::MapEntry;

/// Pages of each CPU's buffer (512 KB: 4,000 records), emptied every
/// [`EVERY`] by a thread of its own: the main thread, busy unwinding a
/// burst of stacks for a second, left it to fill (records lost, and with
/// them every map of a build's process).
const PAGES: usize = 128;
const EVERY: std::time::Duration = std::time::Duration::from_millis(10);

const RECORD_LOST: u32 = 2;
const RECORD_COMM: u32 = 3;
const RECORD_EXIT: u32 = 4;
const RECORD_FORK: u32 = 7;
const RECORD_MMAP2: u32 = 10;
const MISC_COMM_EXEC: u16 = 1 << 13;

/// The mappings of one image of a process (from an exec or a fork made
/// during the capture, or from its start for a process older than it).
pub struct Gen {
    /// When it began (0: before the capture).
    pub since: u64,
    /// Its mappings are all here: it began during the capture with an
    /// exec, or with a fork of a process whose image is exact. Else /proc
    /// (or the parent's maps) gives what was mapped before the capture.
    pub exact: bool,
    /// A fork's parent, whose mappings at the fork the child has.
    pub parent: Option<u32>,
    /// It began with an exec.
    pub exec: bool,
    /// It has (or had) executable memory of no file (a JIT's): a return
    /// address outside every file mapping may be code. Else it is not,
    /// and a walk that reads one read a data word.
    pub anon_code: bool,
    /// Executable file mappings and the time each was made.
    pub maps: Vec<(u64, MapEntry)>,
}

/// The buffers, and the records taken out of them not yet applied.
struct Taken {
    rings: Vec<Ring>,
    recs: Vec<Vec<u8>>,
    /// Every record made before this time (less the slack of one being
    /// written) is among `recs` or applied.
    read_at: u64,
}

// SAFETY: the rings' mappings are only touched under the mutex.
unsafe impl Send for Taken {}

impl Taken {
    fn take(&mut self) {
        self.read_at = crate::target::monotonic_ns();
        for r in &mut self.rings {
            r.take(&mut self.recs);
        }
    }
}

/// The per-CPU record buffers and what they said, by process.
pub struct MmapLog {
    taken: Arc<Mutex<Taken>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    procs: HashMap<u32, Vec<Gen>>,
    /// Processes that exited (their main thread), and when.
    pub exits: HashMap<u32, u64>,
    /// Every exit of a main thread seen, by pid, in time order, kept to
    /// the end: a pid used again names a new process (see [`MmapLog::pgen`]).
    ended: HashMap<u32, Vec<u64>>,
    /// Every fork of a process seen, by its pid, in time order, kept to
    /// the end with `ended` (its images go when it is forgotten).
    forked: HashMap<u32, Vec<u64>>,
    /// Records the kernel could not write (a buffer full).
    pub lost: u64,
    /// Each record's path as this process sees it (rootpath.rs).
    roots: crate::rootpath::Roots,
}

impl Drop for MmapLog {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

struct Ring {
    fd: i32,
    base: *mut u8,
    len: usize,
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: base/len is the mapping made in `open_ring`, fd its event.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
            libc::close(self.fd);
        }
    }
}

fn open_ring(cpu: u32) -> std::io::Result<Ring> {
    const SAMPLE_TID: u64 = 1 << 1;
    const SAMPLE_TIME: u64 = 1 << 2;
    // mmap, comm, task, sample_id_all, mmap2, comm_exec, use_clockid.
    let flags = 1 << 8 | 1 << 9 | 1 << 13 | 1 << 18 | 1 << 23 | 1 << 24 | 1 << 25;
    let attr = crate::events::PerfAttr {
        type_: 1,  // PERF_TYPE_SOFTWARE
        config: 9, // PERF_COUNT_SW_DUMMY
        sample_type: SAMPLE_TID | SAMPLE_TIME,
        flags,
        // bpf_ktime_get_ns's clock: the stack events' times.
        clockid: libc::CLOCK_MONOTONIC,
        ..Default::default()
    };
    let fd = crate::events::perf_event_open(&attr, cpu)?;
    let len = (PAGES + 1) * 4096;
    // SAFETY: maps the event's buffer, as perf_event_open(2) says.
    let base = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0) };
    if base == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        // SAFETY: fd was opened above and is not used again.
        unsafe { libc::close(fd) };
        return Err(e);
    }
    Ok(Ring { fd, base: base.cast(), len })
}

impl Ring {
    /// The records written since the last read, each whole.
    fn take(&mut self, out: &mut Vec<Vec<u8>>) {
        use std::sync::atomic::{AtomicU64, Ordering};
        // SAFETY: data_head and data_tail of struct perf_event_mmap_page,
        // at 1024 and 1032, shared with the kernel as atomics.
        let (head, tail) = unsafe { (&*(self.base.add(1024) as *const AtomicU64), &*(self.base.add(1032) as *const AtomicU64)) };
        let h = head.load(Ordering::Acquire);
        let mut t = tail.load(Ordering::Relaxed);
        let size = (PAGES * 4096) as u64;
        // SAFETY: the data pages follow the first page.
        let data = unsafe { std::slice::from_raw_parts(self.base.add(4096), PAGES * 4096) };
        let at = |off: u64, n: usize| -> Vec<u8> { (0..n as u64).map(|i| data[((off + i) % size) as usize]).collect() };
        while t + 8 <= h {
            let hdr = at(t, 8);
            let len = u16::from_ne_bytes([hdr[6], hdr[7]]) as u64;
            if len < 8 || t + len > h {
                break;
            }
            out.push(at(t, len as usize));
            t += len;
        }
        tail.store(t, Ordering::Release);
    }
}

/// An MMAP2 record of executable memory of no file.
fn is_anon(r: &[u8]) -> bool {
    r.get(72..).is_some_and(|n| {
        let n = &n[..n.iter().position(|&b| b == 0).unwrap_or(n.len())];
        n.starts_with(b"//anon") || crate::runtimes::jitcode::is_jit_mapping(&String::from_utf8_lossy(n))
    })
}

/// Whether these lines of a /proc/PID/maps hold executable memory of no file.
fn anon_code(maps: &[wallclock_stream::procmaps::ProcMap]) -> bool {
    maps.iter().any(|m| m.executable() && (!(m.entry.path.starts_with('/') || m.entry.path.starts_with('[')) || crate::runtimes::jitcode::is_jit_mapping(&m.entry.path)))
}

fn u32_at(r: &[u8], at: usize) -> u32 {
    r.get(at..at + 4).map_or(0, |b| u32::from_ne_bytes(b.try_into().unwrap()))
}
fn u64_at(r: &[u8], at: usize) -> u64 {
    r.get(at..at + 8).map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap()))
}

/// An MMAP2 record's pid and mapping: a file's (or the vDSO's), as
/// `unwind::parse_maps` keeps them, its path as the process sees it; and
/// the file's inode (0 where the record has a build id in its place).
fn mmap2(r: &[u8]) -> Option<(u32, MapEntry, u64)> {
    const MISC_MMAP_BUILD_ID: u16 = 1 << 14;
    let misc = u16::from_ne_bytes([*r.get(4)?, *r.get(5)?]);
    let ino = if misc & MISC_MMAP_BUILD_ID == 0 { u64_at(r, 48) } else { 0 };
    let (pid, start, len, pgoff) = (u32_at(r, 8), u64_at(r, 16), u64_at(r, 24), u64_at(r, 32));
    // maj, min, ino, ino_generation, prot, flags: 32 bytes; the sample
    // id (pid, tid, time) ends the record.
    let name = r.get(72..r.len().saturating_sub(16))?;
    let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
    let mut path = String::from_utf8_lossy(name).into_owned();
    // perf's names for memory of no file: "//anon" (CPython's -X perf
    // trampolines, a JIT's code: taken for a file, the walk did not step
    // through them and Python's stacks fell apart), "/anon_hugepage".
    if !(path.starts_with('/') || path == "[vdso]") || path.starts_with("//") || crate::runtimes::jitcode::is_jit_mapping(&path) {
        return None;
    }
    if let Some(p) = path.strip_suffix(" (deleted)") {
        path = p.to_string();
    }
    Some((pid, MapEntry { start, end: start + len, offset: pgoff, path, build_id: None }, ino))
}

/// Every process in /proc now.
fn all_pids() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc").into_iter().flatten().filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
}

impl MmapLog {
    /// A buffer on every online CPU; an error when one cannot be made
    /// (the capture then reads /proc alone, as before). `only`: the
    /// processes whose maps are synthesized (a `-p` capture's targets),
    /// else every process (system-wide).
    pub fn open(only: Option<&[u32]>) -> std::io::Result<MmapLog> {
        let rings = crate::bpf::online_cpus().into_iter().map(open_ring).collect::<std::io::Result<Vec<_>>>()?;
        let taken = Arc::new(Mutex::new(Taken { rings, recs: Vec::new(), read_at: 0 }));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (t, s) = (taken.clone(), stop.clone());
        std::thread::Builder::new().name("mmaplog".into()).spawn(move || {
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(EVERY);
                t.lock().unwrap_or_else(|e| e.into_inner()).take();
            }
        })?;
        let mut log = MmapLog { taken, stop, procs: HashMap::new(), exits: HashMap::new(), ended: HashMap::new(), forked: HashMap::new(), lost: 0, roots: Default::default() };
        match only {
            Some(pids) => log.synthesize(pids.iter().copied()),
            None => log.synthesize(all_pids()),
        }
        Ok(log)
    }

    /// The maps of the processes `pids` as they are now, from /proc, as
    /// `perf record` synthesizes them at its start: with the records from
    /// now on they are whole. Read later (when a stack of the process was
    /// handled), a process that exited by then had none (a build's,
    /// blocked at the start of a system-wide capture whose first seconds
    /// unwind the stacks of every thread). A `-p` capture reads its
    /// targets' only: every process's was 0.25-0.4 s more to attach on a
    /// machine running 1,500 processes.
    pub fn synthesize(&mut self, pids: impl Iterator<Item = u32>) {
        for pid in pids {
            if self.procs.contains_key(&pid) {
                continue;
            }
            // One read of the file for both.
            let lines = wallclock_stream::procmaps::read(pid).unwrap_or_default();
            let anon_code = anon_code(&lines);
            let maps: Vec<(u64, MapEntry)> = code_files(lines).into_iter().map(|m| (0, m)).collect();
            if !maps.is_empty() {
                self.procs.insert(pid, vec![Gen { since: 0, exact: true, parent: None, exec: false, anon_code, maps }]);
            }
        }
    }

    /// Read what is new, when a stack of time `ts` may need it: every
    /// record made before `ts` is then applied.
    pub fn sync(&mut self, ts: u64) {
        // A record's time is taken a little before it is in the buffer.
        const SLACK: u64 = 1_000_000;
        let mut recs = {
            let mut t = self.taken.lock().unwrap_or_else(|e| e.into_inner());
            if ts.saturating_add(SLACK) >= t.read_at {
                t.take();
            }
            std::mem::take(&mut t.recs)
        };
        // Across CPUs by time: a process that moved applies in order.
        let time = |r: &Vec<u8>| u64_at(r, r.len().saturating_sub(8));
        recs.sort_by_key(time);
        for r in &recs {
            self.apply(r, time(r));
        }
    }

    fn apply(&mut self, r: &[u8], ts: u64) {
        let (kind, misc) = (u32_at(r, 0), u16::from_ne_bytes([r[4], r[5]]));
        match kind {
            RECORD_MMAP2 => {
                if is_anon(r) {
                    if let Some(g) = self.procs.get_mut(&u32_at(r, 8)).and_then(|g| g.last_mut()) {
                        g.anon_code = true;
                    }
                }
                if let Some((pid, mut m, ino)) = mmap2(r) {
                    m.path = self.roots.host_path(pid, m.path, ino);
                    let gens = self.procs.entry(pid).or_default();
                    if gens.is_empty() {
                        gens.push(Gen { since: 0, exact: false, parent: None, exec: false, anon_code: true, maps: Vec::new() });
                    }
                    gens.last_mut().unwrap().maps.push((ts, m));
                }
            }
            RECORD_COMM if misc & MISC_COMM_EXEC != 0 => {
                let gens = self.procs.entry(u32_at(r, 8)).or_default();
                gens.push(Gen { since: ts, exact: true, parent: None, exec: true, anon_code: false, maps: Vec::new() });
            }
            RECORD_FORK => {
                let (pid, ppid) = (u32_at(r, 8), u32_at(r, 12));
                if pid == ppid {
                    return; // a thread
                }
                self.roots.fork(ppid, pid);
                self.roots.trim();
                let (exact, anon_code, maps) = match self.gen_at(ppid, ts) {
                    Some(g) => (g.exact, g.anon_code, g.maps.iter().filter(|(t, _)| *t <= ts).cloned().collect()),
                    None => (false, true, Vec::new()),
                };
                let gen = Gen { since: ts, exact, parent: (!exact).then_some(ppid), exec: false, anon_code, maps };
                let forked = self.forked.entry(pid).or_default();
                let at = forked.partition_point(|&t| t <= ts);
                forked.insert(at, ts);
                // A pid used again: the earlier process's stacks may still
                // be queued, and find its images by their time.
                self.procs.entry(pid).or_default().push(gen);
            }
            RECORD_EXIT if u32_at(r, 8) == u32_at(r, 16) => {
                self.exits.insert(u32_at(r, 8), ts);
                let ended = self.ended.entry(u32_at(r, 8)).or_default();
                let at = ended.partition_point(|&t| t <= ts);
                ended.insert(at, ts);
            }
            RECORD_LOST => self.lost += u64_at(r, 16),
            _ => {}
        }
    }

    /// The image `pid` ran at time `ts`, when one is known here.
    pub fn gen_at(&self, pid: u32, ts: u64) -> Option<&Gen> {
        self.procs.get(&pid)?.iter().rev().find(|g| g.since <= ts)
    }

    /// The generation of the process of `pid` that a thread born (or a
    /// stack taken) at `ts` belongs to: how many processes of that pid the
    /// capture saw end before then (0: the first). A process ends at its
    /// main thread's exit record, and a later one of the pid begins with a
    /// fork after it (a pid is free again only once its process is
    /// reaped). An exit with no fork of the pid after it (up to `ts`, or
    /// to the next exit) is not counted: the process is still there, its
    /// other threads outliving its main thread (an exit_group's last
    /// mmput, whose stack comes after the main thread's exit; a main
    /// thread that called pthread_exit), or a thread that exec'd took the
    /// main thread's pid after the kernel killed it (de_thread), no fork.
    pub fn pgen(&self, pid: u32, ts: u64) -> u32 {
        let Some(e) = self.ended.get(&pid) else { return 0 };
        let n = e.partition_point(|&t| t < ts);
        (0..n).map(|i| u32::from(self.forked_between(pid, e[i], e.get(i + 1).copied().filter(|_| i + 1 < n).unwrap_or(ts)))).sum()
    }

    /// Whether a process of `pid` was forked after `from`, up to `to`.
    fn forked_between(&self, pid: u32, from: u64, to: u64) -> bool {
        self.forked.get(&pid).is_some_and(|f| f.iter().any(|&t| t > from && t <= to))
    }

    /// When the process of `pid` of generation `pgen` ended (its main
    /// thread's exit), if it did.
    pub fn end_of(&self, pid: u32, pgen: u32) -> Option<u64> {
        self.ended.get(&pid)?.iter().rev().find(|&&e| self.pgen(pid, e) == pgen).copied()
    }

    /// Forget the process of `pid` of generation `pgen` (its Maps record
    /// is made): its images and its exit; a later process of the pid
    /// keeps its own (its stacks may still be queued).
    pub fn forget(&mut self, pid: u32, pgen: u32) {
        let Some(end) = self.end_of(pid, pgen) else {
            self.procs.remove(&pid);
            self.exits.remove(&pid);
            return;
        };
        if let Some(gens) = self.procs.get_mut(&pid) {
            gens.retain(|g| g.since > end);
            if gens.is_empty() {
                self.procs.remove(&pid);
            }
        }
        if self.exits.get(&pid).is_some_and(|&t| t <= end) {
            self.exits.remove(&pid);
        }
    }

    /// Forget the processes that exited before `ts` and are not in
    /// `keep`: no stack of theirs is still to come.
    pub fn forget_exited(&mut self, ts: u64, keep: impl Fn(u32) -> bool) {
        let gone: Vec<(u32, u64)> = self.exits.iter().filter(|&(&p, &t)| t < ts && !keep(p)).map(|(&p, &t)| (p, t)).collect();
        // Each the process that exited then; a later one of the pid
        // keeps its images.
        for (p, t) in gone {
            self.forget(p, self.pgen(p, t));
        }
    }

    /// Processes known here (for the tests and the stats).
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }
}

/// Of the lines of a /proc/PID/maps, the executable mappings the
/// unwinder keeps.
pub(crate) fn code_files(maps: Vec<wallclock_stream::procmaps::ProcMap>) -> Vec<MapEntry> {
    maps.into_iter()
        .filter(|m| m.executable())
        // Files, and the vDSO (so its frames read `[vdso]+0x..` after exit
        // rather than an anonymous address).
        .filter(|m| m.entry.path.starts_with('/') || m.entry.path == "[vdso]")
        .filter(|m| !crate::runtimes::jitcode::is_jit_mapping(&m.entry.path))
        .map(|m| {
            let mut e = m.entry;
            if let Some(p) = e.path.strip_suffix(" (deleted)") {
                e.path = p.to_string();
            }
            e
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process started and gone before the log is read: its image's
    /// maps (libc, mapped by the loader after the exec) are all there,
    /// with the exec and the fork before it.
    #[test]
    fn a_short_process_has_its_maps_after_it_is_gone() {
        let Ok(mut log) = MmapLog::open(None) else {
            eprintln!("skipped: perf_event_open refused (not root?)");
            return;
        };
        let child = std::process::Command::new("/bin/true").spawn().unwrap();
        let pid = child.id();
        child.wait_with_output().unwrap();
        log.sync(u64::MAX);
        let gens = log.procs.get(&pid).expect("the child's records");
        assert!(gens.len() >= 2, "a fork and an exec: {}", gens.len());
        let g = log.gen_at(pid, u64::MAX).unwrap();
        assert!(g.exact && g.exec);
        let names: Vec<&str> = g.maps.iter().map(|(_, m)| m.path.as_str()).collect();
        eprintln!("{names:?}");
        assert!(names.iter().any(|p| p.ends_with("/true")), "{names:?}");
        assert!(names.iter().any(|p| p.contains("/libc.so")), "{names:?}");
        assert!(log.exits.contains_key(&pid));
    }
}
