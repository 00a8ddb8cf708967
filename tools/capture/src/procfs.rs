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
    fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).ok().map(|s| s.trim_end().to_string())
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

/// Up to 16K of a thread's user stack from `sp`, shrinking on failure.
pub fn read_stack(pid: u32, sp: u64) -> Vec<u8> {
    let Ok(mut f) = fs::File::open(format!("/proc/{pid}/mem")) else { return Vec::new() };
    for len in [16384usize, 8192, 4096, 2048, 512] {
        let mut buf = vec![0u8; len];
        if f.seek(SeekFrom::Start(sp)).is_ok() && f.read_exact(&mut buf).is_ok() {
            return buf;
        }
    }
    Vec::new()
}

/// Address ranges of the kernel functions that dispatch a tracepoint or
/// perf event to a BPF program, read once from /proc/kallsyms.
pub fn dispatch_ranges() -> &'static [(u64, u64)] {
    static RANGES: std::sync::OnceLock<Vec<(u64, u64)>> = std::sync::OnceLock::new();
    RANGES.get_or_init(|| {
        let Ok(s) = fs::read_to_string("/proc/kallsyms") else { return Vec::new() };
        let mut syms: Vec<(u64, bool)> = s
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let a = u64::from_str_radix(it.next()?, 16).ok().filter(|&a| a != 0)?;
                let t = it.next()?;
                let n = it.next()?;
                matches!(t, "t" | "T").then(|| {
                    let d = ["__traceiter_", "__bpf_trace_", "bpf_trace_run", "__bpf_prog_enter", "bpf_prog_", "__bpf_prog_run"]
                        .iter()
                        .any(|p| n.starts_with(p));
                    (a, d)
                })
            })
            .collect();
        syms.sort_unstable();
        syms.windows(2).filter(|w| w[0].1).map(|w| (w[0].0, w[1].0)).collect()
    })
}

/// Kernel symbol addresses, to turn /proc/PID/stack's `func+0x1f/0x80` into
/// addresses a symbolizer resolves like any other.
#[derive(Default)]
pub struct Kallsyms {
    by_name: HashMap<String, u64>,
}

impl Kallsyms {
    pub fn load() -> Kallsyms {
        let mut by_name = HashMap::new();
        if let Ok(s) = fs::read_to_string("/proc/kallsyms") {
            for l in s.lines() {
                let mut it = l.split_whitespace();
                let (Some(a), Some(t), Some(n)) = (it.next(), it.next(), it.next()) else { continue };
                if !matches!(t, "t" | "T") {
                    continue;
                }
                if let Ok(a) = u64::from_str_radix(a, 16) {
                    if a != 0 {
                        by_name.entry(n.to_string()).or_insert(a);
                    }
                }
            }
        }
        Kallsyms { by_name }
    }

    /// Kernel stack of a thread, root first, as return addresses.
    pub fn task_stack(&self, pid: u32, tid: u32) -> Vec<u64> {
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
            if let Some(a) = self.by_name.get(name) {
                v.push(a + off);
            }
        }
        v.reverse();
        v
    }
}
