//! BPF loading helpers: libbpf's log kept so a load failure shows the
//! verifier's reason, per-CPU perf events, map reads.

use std::sync::Mutex;

use anyhow::{anyhow, Result};
use libbpf_rs::{MapCore, MapFlags, PrintLevel};

static LOG: Mutex<String> = Mutex::new(String::new());

fn keep(level: PrintLevel, msg: String) {
    if std::env::var_os("WALLCLOCK_BPF_DEBUG").is_some() {
        eprint!("{msg}");
    }
    if level == PrintLevel::Debug {
        return;
    }
    let mut l = LOG.lock().unwrap();
    l.push_str(&msg);
    if l.len() > 1 << 20 {
        let cut = l.len() - (1 << 19);
        l.drain(..cut);
    }
}

/// Route libbpf's messages into a buffer (not the terminal).
pub fn capture_log() {
    libbpf_rs::set_print(Some((PrintLevel::Info, keep)));
}

/// Where libbpf's log is now: [`log_mentions_since`] reads what follows.
pub fn log_mark() -> usize {
    LOG.lock().unwrap().len()
}

/// Whether libbpf or the verifier wrote `what` since `mark` (a load that
/// failed for a reason a retry can avoid).
pub fn log_mentions_since(mark: usize, what: &str) -> bool {
    let l = LOG.lock().unwrap();
    l.get(mark.min(l.len())..).is_some_and(|s| s.contains(what))
}

/// A load error with the verifier's last words.
pub fn load_error(what: &str, e: libbpf_rs::Error) -> anyhow::Error {
    let log = LOG.lock().unwrap().clone();
    let tail: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = tail[tail.len().saturating_sub(12)..].join("\n  ");
    let mut msg = format!("cannot load the BPF program of {what}: {e}");
    if !tail.is_empty() {
        msg.push_str(&format!("\nlibbpf/verifier says:\n  {tail}"));
    }
    anyhow!(msg)
}

pub fn put_u32_set(map: &impl MapCore, ids: &[u32]) -> Result<()> {
    for id in ids {
        map.update(&id.to_ne_bytes(), &[1u8], MapFlags::ANY)?;
    }
    Ok(())
}

/// Add one to the u32 in entry 0 of an array map: capture.bpf.h's
/// `rt_gen`, after a runtime process was added to `py_cfg` or `rb_cfg`
/// (each thread then decides again whether its walks run).
pub fn bump_gen(map: &impl MapCore) {
    let key = 0u32.to_ne_bytes();
    let n = map.lookup(&key, MapFlags::ANY).ok().flatten().and_then(|v| Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?))).unwrap_or(0);
    // A failed update leaves the threads' decisions as they were: the
    // walks of that process are then not hashed, its stacks still read.
    let _ = map.update(&key, &n.wrapping_add(1).to_ne_bytes(), MapFlags::ANY);
}

/// The keys of a hash map keyed by u32 (pids).
pub fn u32_keys(map: &impl MapCore) -> Vec<u32> {
    map.keys().filter_map(|k| Some(u32::from_ne_bytes(k.get(..4)?.try_into().ok()?))).collect()
}

/// Every key/value of a hash map.
pub fn dump(map: &impl MapCore) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut v = Vec::new();
    for k in map.keys() {
        if let Ok(Some(val)) = map.lookup(&k, MapFlags::ANY) {
            v.push((k, val));
        }
    }
    v
}

/// Sums of a per-CPU array of u64 counters.
pub fn percpu_sums(map: &impl MapCore, n: u32) -> Vec<u64> {
    (0..n)
        .map(|i| {
            map.lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)
                .ok()
                .flatten()
                .map(|cpus| cpus.iter().map(|b| u64::from_ne_bytes(b[..8].try_into().unwrap())).sum())
                .unwrap_or(0)
        })
        .collect()
}

/// Online CPUs.
pub fn online_cpus() -> Vec<u32> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_else(|_| "0".into());
    let mut v = Vec::new();
    for part in s.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    v.extend(a..=b)
                }
            }
            None => {
                if let Ok(a) = part.parse() {
                    v.push(a)
                }
            }
        }
    }
    v
}

