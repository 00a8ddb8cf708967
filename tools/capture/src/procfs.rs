//! What /proc tells about target processes and threads: their threads,
//! the state and stack of a thread that is blocked when the capture begins,
//! kernel symbol addresses.

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom};

/// Whether the process lives (a zombie does not).
pub fn exists(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s.rfind(')').and_then(|i| s[i + 1..].trim_start().chars().next()).is_some_and(|c| c != 'Z' && c != 'X'),
        Err(_) => false,
    }
}

/// Every live descendant of `roots` (children, their children...), from
/// the parent pid of each process in /proc.
pub fn descendants(roots: &[u32]) -> Vec<u32> {
    let Ok(rd) = fs::read_dir("/proc") else { return Vec::new() };
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for e in rd.filter_map(|e| e.ok()) {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(s) = fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let ppid = s.rfind(')').and_then(|i| s[i + 1..].split_whitespace().nth(1)?.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut out = Vec::new();
    let mut todo: Vec<u32> = roots.to_vec();
    while let Some(p) = todo.pop() {
        for &c in children.get(&p).into_iter().flatten() {
            if !roots.contains(&c) && !out.contains(&c) {
                out.push(c);
                todo.push(c);
            }
        }
    }
    out.sort_unstable();
    out
}

/// Thread ids of a process.
pub fn threads(pid: u32) -> Vec<u32> {
    let Ok(rd) = fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut v: Vec<u32> = rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    v.sort_unstable();
    v
}

/// Thread group id of a thread.
pub fn tgid_of(tid: u32) -> Option<u32> {
    let s = fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|v| v.trim().parse().ok())
}

pub fn comm(pid: u32, tid: u32) -> Option<String> {
    // Bytes, not text: a thread names itself with any bytes (PR_SET_NAME).
    let b = fs::read(format!("/proc/{pid}/task/{tid}/comm")).ok()?;
    Some(wallclock_stream::names::from_bytes(b.strip_suffix(b"\n").unwrap_or(&b)))
}

pub fn cmdline(pid: u32) -> Option<Vec<String>> {
    let s = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(s.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect())
}

/// The one-letter state of /proc/PID/task/TID/stat.
pub fn state(pid: u32, tid: u32) -> Option<char> {
    let s = fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    let after = &s[s.rfind(')')? + 1..];
    after.trim_start().chars().next()
}

/// User sp and pc of a thread blocked in a system call (`/proc/.../syscall`).
pub fn syscall_regs(pid: u32, tid: u32) -> Option<(u64, u64)> {
    let s = fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    let f: Vec<&str> = s.split_whitespace().collect();
    if f.len() < 9 {
        return None;
    }
    let hex = |x: &str| u64::from_str_radix(x.trim_start_matches("0x"), 16).ok();
    Some((hex(f[7])?, hex(f[8])?))
}

/// Up to `max` bytes (what the BPF side copies: `event::USTACK_MAX`) of
/// a thread's user stack from `sp`, shrinking on failure.
pub fn read_stack(pid: u32, sp: u64, max: usize) -> Vec<u8> {
    let Ok(mut f) = fs::File::open(format!("/proc/{pid}/mem")) else { return Vec::new() };
    for len in [max, 16384, 8192, 4096, 2048, 512].into_iter().filter(|&l| l <= max) {
        let mut buf = vec![0u8; len];
        if f.seek(SeekFrom::Start(sp)).is_ok() && f.read_exact(&mut buf).is_ok() {
            return buf;
        }
    }
    Vec::new()
}

/// Each text symbol of /proc/kallsyms, read line by line: the file is
/// megabytes, and holding it (or a map of every name) would double the
/// tools' memory.
fn for_each_text_symbol(mut f: impl FnMut(u64, &str)) {
    use std::io::BufRead;
    let Ok(file) = fs::File::open("/proc/kallsyms") else { return };
    let mut r = std::io::BufReader::new(file);
    let mut line = String::new();
    while r.read_line(&mut line).unwrap_or(0) > 0 {
        let mut it = line.split_whitespace();
        if let (Some(a), Some(t), Some(n)) = (it.next(), it.next(), it.next()) {
            if matches!(t, "t" | "T") {
                if let Ok(a) = u64::from_str_radix(a, 16) {
                    if a != 0 {
                        f(a, n);
                    }
                }
            }
        }
        line.clear();
    }
}

/// Whether `addr` is in one of the dispatch functions.
pub fn in_dispatch(addr: u64) -> bool {
    let r = dispatch_ranges();
    let i = r.partition_point(|&(lo, _)| lo <= addr);
    i > 0 && addr < r[i - 1].1
}

/// Address ranges of the kernel functions that dispatch a tracepoint or
/// perf event to a BPF program, read once from /proc/kallsyms; sorted and
/// disjoint (each ends where the next symbol starts).
pub fn dispatch_ranges() -> &'static [(u64, u64)] {
    static RANGES: std::sync::OnceLock<Vec<(u64, u64)>> = std::sync::OnceLock::new();
    RANGES.get_or_init(|| {
        const PREFIXES: [&str; 6] =
            ["__traceiter_", "__bpf_trace_", "bpf_trace_run", "__bpf_prog_enter", "bpf_prog_", "__bpf_prog_run"];
        // Every symbol start, to find where each dispatch function ends.
        let mut starts: Vec<u64> = Vec::new();
        let mut dispatch: Vec<u64> = Vec::new();
        for_each_text_symbol(|a, n| {
            starts.push(a);
            if PREFIXES.iter().any(|p| n.starts_with(p)) {
                dispatch.push(a);
            }
        });
        starts.sort_unstable();
        starts.dedup();
        dispatch.sort_unstable();
        dispatch.dedup();
        dispatch
            .into_iter()
            .filter_map(|a| {
                let i = starts.partition_point(|&s| s <= a);
                starts.get(i).map(|&end| (a, end))
            })
            .collect()
    })
}

/// Address ranges of the kernel text functions whose names are `names`
/// (each to the next symbol's start), sorted, from /proc/kallsyms.
/// A name ending in `*` is a prefix.
pub fn ranges_of(names: &[&str]) -> Vec<(u64, u64)> {
    let mut starts: Vec<u64> = Vec::new();
    let mut want: Vec<u64> = Vec::new();
    for_each_text_symbol(|a, n| {
        starts.push(a);
        if names.iter().any(|w| match w.strip_suffix('*') {
            Some(p) => n.starts_with(p),
            None => *w == n,
        }) {
            want.push(a);
        }
    });
    starts.sort_unstable();
    starts.dedup();
    want.sort_unstable();
    want.dedup();
    want.into_iter()
        .filter_map(|a| {
            let i = starts.partition_point(|&s| s <= a);
            starts.get(i).map(|&end| (a, end))
        })
        .collect()
}

/// One frame of /proc/PID/task/TID/stack: `do_nanosleep+0x6d/0x170`.
pub type NamedFrame = (String, u64);

/// Kernel stack of a thread as /proc shows it, root first, by name.
pub fn task_stack_names(pid: u32, tid: u32) -> Vec<NamedFrame> {
    let Ok(s) = fs::read_to_string(format!("/proc/{pid}/task/{tid}/stack")) else { return Vec::new() };
    let mut v = Vec::new();
    for l in s.lines() {
        // "[<0>] do_nanosleep+0x6d/0x170"
        let Some(sym) = l.split_whitespace().nth(1) else { continue };
        let (name, off) = match sym.split_once('+') {
            Some((n, rest)) => (n, rest.split('/').next().unwrap_or("0")),
            None => (sym, "0"),
        };
        let off = u64::from_str_radix(off.trim_start_matches("0x"), 16).unwrap_or(0);
        v.push((name.to_string(), off));
    }
    v.reverse();
    v
}

/// Kernel symbol addresses of just the names asked for, to turn
/// /proc/PID/stack's frames into addresses a symbolizer resolves like any
/// other.
#[derive(Default)]
pub struct Kallsyms {
    by_name: HashMap<String, u64>,
}

impl Kallsyms {
    pub fn load_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Kallsyms {
        let mut by_name: HashMap<String, u64> = names.into_iter().map(|n| (n.to_string(), 0)).collect();
        if by_name.is_empty() {
            return Kallsyms { by_name };
        }
        for_each_text_symbol(|a, n| {
            if let Some(v) = by_name.get_mut(n) {
                if *v == 0 {
                    *v = a;
                }
            }
        });
        by_name.retain(|_, a| *a != 0);
        Kallsyms { by_name }
    }

    /// Addresses of named frames; unknown names are left out.
    pub fn resolve(&self, frames: &[NamedFrame]) -> Vec<u64> {
        frames.iter().filter_map(|(n, off)| self.by_name.get(n).map(|a| a + off)).collect()
    }
}

/// A thread's context switches so far (voluntary and not: the kernel's
/// nvcsw + nivcsw), from /proc/PID/task/TID/status; None if it is gone.
/// Unchanged since a visit, the thread has not run since: its user stack
/// is the one it had then (a read that does not wait on the thread, as
/// /proc's `syscall` does: a second of an emulated guest's time a read).
pub fn switches(pid: u32, tid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
    let field = |name: &str| s.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse::<u64>().ok());
    Some(field("voluntary_ctxt_switches:")? + field("nonvoluntary_ctxt_switches:")?)
}
