//! The BPF side's thread entries: read from the thread map and the
//! `reborn` map, and those of exited threads moved out as the capture
//! goes on ([`Retired`]).

use std::time::Duration;

use libbpf_rs::MapMut;

use super::skel::Maps;
use crate::bpf;
use crate::event::{self, WcThread};

/// Threads that exited, moved out of the BPF thread map as the capture
/// goes on (once a second): a busy machine's or a build's short-lived
/// processes would otherwise fill the map (16384 entries: a parallel build
/// starts that many threads in about a minute) and every later thread's
/// time would be lost. An exited thread's entry is final, so it is read
/// once and kept here, and its tid may be used again.
#[derive(Default)]
pub struct Retired {
    pub threads: Vec<(u32, WcThread)>,
    /// The processes of every thread retired (the header's pids).
    pub pids: std::collections::BTreeSet<u32>,
    last: Option<std::time::Instant>,
}

impl Retired {
    /// Once a second: the exited threads out of the maps, handed to
    /// `retire` (the tool's [`super::tool::Tool::retire`]: true when it keeps
    /// them itself).
    pub fn turn(&mut self, maps: &Maps<'_>, retire: impl FnOnce(&[(u32, WcThread)]) -> bool) {
        if self.last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            return;
        }
        self.last = Some(std::time::Instant::now());
        give_back_heap();
        let (_, threads) = thread_map(maps.threads);
        let mut dead = Vec::new();
        for (key, th) in threads.into_iter().filter(|(_, t)| t.exit_ns != 0) {
            // Taken out as it is now: a new thread given the tid since it
            // was read has moved it to `reborn` (it is read from there)
            // and has its own entry here, which goes back.
            let tid = event::real_tid(key).to_ne_bytes();
            let v = match libbpf_rs::MapCore::lookup_and_delete(maps.threads, &tid) {
                Ok(Some(v)) => v,
                Ok(None) => continue,
                // A kernel without the command for hash maps (before
                // 5.14): taken as read.
                Err(_) => {
                    let _ = libbpf_rs::MapCore::delete(maps.threads, &tid);
                    dead.push((key, th));
                    continue;
                }
            };
            match event::from_bytes::<WcThread>(&v) {
                Some(th) if th.exit_ns != 0 => dead.push((key, th)),
                _ => {
                    let _ = libbpf_rs::MapCore::update(maps.threads, &tid, &v, libbpf_rs::MapFlags::NO_EXIST);
                }
            }
        }
        let (raw, reborn) = reborn_map(maps.reborn);
        for (k, _) in &raw {
            let _ = libbpf_rs::MapCore::delete(maps.reborn, k);
        }
        dead.extend(reborn);
        if dead.is_empty() {
            return;
        }
        let taken = retire(&dead);
        self.pids.extend(dead.iter().map(|(_, t)| t.pid));
        if !taken {
            self.threads.extend(dead);
        }
    }

    /// The thread map now with the retired threads.
    pub fn with(&self, mut live: Vec<(u32, WcThread)>) -> Vec<(u32, WcThread)> {
        live.extend(self.threads.iter().copied());
        live
    }
}

/// Return the free pages of the heap to the kernel, once a second. The
/// drain thread allocates each stack event and the main thread frees it
/// (a burst of first stacks queues megabytes: 2,500 threads blocked at the
/// start of a system-wide capture, a build's new processes), and glibc
/// keeps what is freed in the drain thread's arena: the capture's
/// resident memory stayed at its highest queue ever, 20-40 MB above what
/// it held. malloc_trim also releases free pages inside the arenas.
fn give_back_heap() {
    // SAFETY: malloc_trim only walks and madvises glibc's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A map's entries as bytes: (key, value).
type RawEntries = Vec<(Vec<u8>, Vec<u8>)>;

/// The thread map: each thread's key ([`event::thread_key`]: its tid
/// unless it is a later thread of a tid used again) and the BPF side's
/// accounting.
pub fn thread_map(map: &MapMut<'static>) -> (RawEntries, Vec<(u32, WcThread)>) {
    threads_of(map, |k| Some(u32::from_ne_bytes(k.get(..4)?.try_into().ok()?)))
}

/// The `reborn` map: final entries of threads whose tid a new thread
/// took before they were retired (bpf/capture.bpf.h, thread_reborn), by
/// thread key. Its key holds the tid in its low 32 bits.
pub fn reborn_map(map: &MapMut<'static>) -> (RawEntries, Vec<(u32, WcThread)>) {
    threads_of(map, |k| Some(u64::from_ne_bytes(k.get(..8)?.try_into().ok()?) as u32))
}

/// A map of thread entries, by thread key: `tid_of` reads a key's tid.
fn threads_of(map: &MapMut<'static>, tid_of: impl Fn(&[u8]) -> Option<u32>) -> (RawEntries, Vec<(u32, WcThread)>) {
    let raw = bpf::dump(map);
    let threads = raw
        .iter()
        .filter_map(|(k, v)| {
            let th = event::from_bytes::<WcThread>(v)?;
            Some((event::thread_key(tid_of(k)?, th.tgen), th))
        })
        .collect();
    (raw, threads)
}

/// Every thread BPF holds: the thread map's and the `reborn` map's.
pub fn bpf_threads(maps: &Maps<'_>) -> (RawEntries, Vec<(u32, WcThread)>) {
    let (mut raw, mut threads) = thread_map(maps.threads);
    let (rraw, reborn) = reborn_map(maps.reborn);
    raw.extend(rraw);
    threads.extend(reborn);
    (raw, threads)
}
