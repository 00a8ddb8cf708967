//! A lock the capture could name by no symbol (`lock 0x7f3a2c0008e0`: a
//! mutex on the heap or on a thread's stack, whose address changes with
//! every run) named by its commonest blocking call site: `lock in
//! worker_loop`. The call site of a stack blocked on it is its leafmost
//! frame of the program's own code: not the kernel's, not a synthetic
//! `[bracketed]` frame, not the C runtime's ([`crate::cruntime`]:
//! `pthread_mutex_lock`, `__lll_lock_wait`, the futex wrappers), not a
//! standard library's lock wrapper (`std::mutex::lock`,
//! `__gthread_mutex_lock`, Rust's `std::sync::Mutex::lock`, often inlined
//! into the caller's module), not an address with no name. Each lock
//! takes the site with the most blocked time over all its stacks, so one
//! lock has one name wherever it was taken from.
//!
//! Two locks of one process whose commonest site is the same are told
//! apart by their rank there, heaviest first: `lock in f`, `lock in f #2`.
//! A rank, not a piece of the address: the address changes with every run
//! and says nothing to a reader, the rank keeps the lock that matters
//! most under the plain name. The address stays with the record (the
//! stream's `object`) for a reader to match against a core dump. Locks of
//! two processes are named apart: each is told from its process's others
//! (as `lock g_lock` names one symbol in each process).
//!
//! stackmerge names them in the merged stream (its frames), wcreport in
//! an unmerged one, `wcexport --trace` in the slices' arguments, `wcdump`
//! in each blocked thread's object: all through [`LockSites`].

use std::collections::{BTreeMap, HashMap};

use crate::Frame;

/// The address of a lock named by no symbol: `lock 0xADDR`.
pub fn unnamed_lock(object: &str) -> Option<u64> {
    u64::from_str_radix(object.strip_prefix("lock 0x")?, 16).ok()
}

/// The lock wrappers of the languages' standard libraries, by the start of
/// their names: inlined, they carry the caller's module.
const WRAPPERS: &[&str] = &["std::", "<std::", "core::", "__gthread", "__gnu_cxx::", "lock_api::", "<lock_api::", "parking_lot::"];

fn is_site(f: &Frame) -> bool {
    let n = f.func.as_str();
    if f.kernel || n.is_empty() || (n.starts_with('[') && n.ends_with(']')) || f.unnamed_module().is_some() {
        return false;
    }
    if n.strip_prefix("0x").is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit())) {
        return false;
    }
    if WRAPPERS.iter().any(|w| n.starts_with(w)) {
        return false;
    }
    match f.module.as_deref().filter(|m| !m.is_empty()) {
        Some(m) => !(m.contains("vdso") || crate::cruntime::is_runtime_file(m.rsplit('/').next().unwrap_or(m))),
        None => !crate::cruntime::is_runtime_name(n),
    }
}

/// The call site of a stack blocked on a lock, from its frames leaf
/// first: the first of the program's own (see the module's text).
pub fn call_site<'a>(leaf_first: impl IntoIterator<Item = &'a Frame>) -> Option<&'a str> {
    leaf_first.into_iter().find(|f| is_site(f)).map(|f| f.func.as_str())
}

/// A process: its pid and the generation of the process under it (the
/// stream's `pgen`; 0 where there is none).
pub type Process = (u32, u32);

#[derive(Default)]
struct Lock {
    ns: u64,
    sites: BTreeMap<String, u64>,
}

/// The blocked time of each lock named by no symbol, by call site.
#[derive(Default)]
pub struct LockSites {
    locks: BTreeMap<(Process, u64), Lock>,
}

impl LockSites {
    /// A stack of `process` that blocked `ns` on `object` (any object:
    /// those named otherwise are left out), its frames leaf first.
    pub fn add<'a>(&mut self, process: Process, object: &str, leaf_first: impl IntoIterator<Item = &'a Frame>, ns: u64) {
        let Some(addr) = unnamed_lock(object) else { return };
        let lock = self.locks.entry((process, addr)).or_default();
        lock.ns += ns;
        if let Some(site) = call_site(leaf_first) {
            *lock.sites.entry(site.to_string()).or_default() += ns;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }

    /// Each lock's name: `lock in SITE`, `#N` after it for the Nth lock of
    /// its process at that site by time; a lock no stack gave a site for
    /// keeps its address.
    pub fn names(&self) -> LockNames {
        let mut by_site: BTreeMap<(Process, &str), Vec<(u64, u64)>> = BTreeMap::new();
        for (&(process, addr), lock) in &self.locks {
            let site = lock.sites.iter().max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)));
            if let Some((site, _)) = site {
                by_site.entry((process, site.as_str())).or_default().push((lock.ns, addr));
            }
        }
        let mut names = HashMap::new();
        for ((process, site), mut locks) in by_site {
            locks.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
            for (i, (_, addr)) in locks.into_iter().enumerate() {
                let name = if i == 0 { format!("lock in {site}") } else { format!("lock in {site} #{}", i + 1) };
                names.insert((process, addr), name);
            }
        }
        LockNames { names }
    }
}

/// The names [`LockSites::names`] gave.
#[derive(Debug, Default)]
pub struct LockNames {
    names: HashMap<(Process, u64), String>,
}

impl LockNames {
    /// The name of `object` in `process` when it is a lock named by its
    /// call site; None for any other object.
    pub fn get(&self, process: Process, object: &str) -> Option<&str> {
        self.names.get(&(process, unnamed_lock(object)?)).map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(func: &str, module: Option<&str>) -> Frame {
        Frame { module: module.map(str::to_string), ..Frame::named(func) }
    }

    fn stack(site: &str) -> Vec<Frame> {
        vec![
            Frame::kernel("futex_wait"),
            frame("__lll_lock_wait", Some("/usr/lib/x86_64-linux-gnu/libc.so.6")),
            frame("___pthread_mutex_lock", Some("/usr/lib/x86_64-linux-gnu/libc.so.6")),
            frame("std::mutex::lock", Some("/opt/app/bin/app")),
            frame("0x7f0012345678", None),
            frame(site, Some("/opt/app/bin/app")),
            frame("main", Some("/opt/app/bin/app")),
        ]
    }

    #[test]
    fn the_site_is_the_programs_leafmost_frame() {
        assert_eq!(call_site(&stack("Account::withdraw")), Some("Account::withdraw"));
        // No modules (folded input): the C runtime by its names.
        let plain = [Frame::named("__lll_lock_wait"), Frame::named("pthread_mutex_lock"), Frame::named("worker_loop")];
        assert_eq!(call_site(&plain), Some("worker_loop"));
        assert_eq!(call_site(&[Frame::named("[sleep]"), frame("libc.so.6+0x9a1c", Some("libc.so.6"))]), None);
        assert_eq!(unnamed_lock("lock 0x7f00aa"), Some(0x7f00aa));
        assert_eq!(unnamed_lock("lock g_lock"), None);
    }

    /// A lock's heaviest site names it wherever it was taken; two locks
    /// with one site are told apart, the heavier plain; a symbol's lock
    /// and another process's lock are left alone or apart.
    #[test]
    fn names_by_heaviest_site_told_apart() {
        let mut s = LockSites::default();
        s.add((7, 0), "lock 0x1000", &stack("withdraw"), 300);
        s.add((7, 0), "lock 0x1000", &stack("audit"), 100);
        s.add((7, 0), "lock 0x2000", &stack("withdraw"), 500);
        s.add((7, 0), "lock g_lock", &stack("withdraw"), 900);
        s.add((8, 0), "lock 0x1000", &stack("audit"), 50);
        s.add((7, 0), "lock 0x3000", &[Frame::kernel("futex_wait")], 50);
        let n = s.names();
        assert_eq!(n.get((7, 0), "lock 0x2000"), Some("lock in withdraw"));
        assert_eq!(n.get((7, 0), "lock 0x1000"), Some("lock in withdraw #2"));
        assert_eq!(n.get((8, 0), "lock 0x1000"), Some("lock in audit"));
        assert_eq!(n.get((7, 0), "lock g_lock"), None);
        assert_eq!(n.get((7, 0), "lock 0x3000"), None);
    }
}
