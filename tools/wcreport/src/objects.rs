//! What the off-CPU time waited on (stream 1.6's `object`, a frame after
//! the state leaf once merged): each object by time, with its heaviest
//! threads and call sites.

use std::collections::BTreeMap;

use serde::Serialize;
use wallclock_stream::locks::{LockNames, LockSites};
use wallclock_stream::pgen::pgen_of;
use wallclock_stream::{Kind, Stack};

/// One object and the time waited on it.
#[derive(Debug, Clone, Serialize)]
pub struct WaitedOn {
    /// As the capture named it: `file /path`, `tcp 127.0.0.1:5432`,
    /// `lock g_lock`, `child make 4242`...
    pub object: String,
    pub ns: u64,
    pub count: u64,
    /// The capture's own names of it where they differ from `object`: a
    /// lock named by its call site was `lock 0x7f..`, its address (the
    /// heaviest first, at most 3: one per process holding such a lock).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub raw: Vec<String>,
    /// Heaviest first (at most 3).
    pub threads: Vec<WaiterThread>,
    /// Where it was waited on: the innermost user frames, leaf first,
    /// heaviest first (at most 3).
    pub sites: Vec<WaitSite>,
}

#[derive(Debug, Clone, Serialize)]
pub struct WaiterThread {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub ns: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct WaitSite {
    pub site: String,
    pub ns: u64,
}

/// A stack's object: the frame after its state leaf (where stackmerge
/// put it, a lock it named by its call site included), else its field.
pub fn object_of(s: &Stack) -> Option<String> {
    if s.kind != Kind::Off {
        return None;
    }
    let funcs: Vec<&str> = s.frames.iter().map(|f| f.func.as_str()).collect();
    wallclock_stream::accounting::object_of(&funcs).map(str::to_string).or_else(|| s.object.clone())
}

/// The innermost user frames of a stack (not the kernel's, not the state
/// leaf or the object's frame), leaf first, joined by ` ← `.
fn site(s: &Stack) -> String {
    let user: Vec<&str> = s.frames.iter().filter(|f| !f.kernel && !f.func.starts_with('[')).map(|f| f.func.as_str()).collect();
    let v: Vec<&str> = user.iter().rev().take(3).copied().collect();
    if v.is_empty() {
        "[no user frames]".to_string()
    } else {
        v.join(" ← ")
    }
}

fn top<K: Ord + Clone>(m: BTreeMap<K, u64>, n: usize) -> Vec<(K, u64)> {
    let mut v: Vec<(K, u64)> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.truncate(n);
    v
}

/// The objects of `stacks` by time, heaviest first, at most `n`. A lock
/// the capture could not name by a symbol (`lock 0x...`: on the heap, in a
/// thread's stack) is named by its commonest call site
/// (`wallclock_stream::locks`; stackmerge did so in a merged stream), its
/// address kept in `raw`.
pub fn waited_on(stacks: &[&Stack], comms: &BTreeMap<(u32, u32), String>, n: usize) -> Vec<WaitedOn> {
    type Sums = (u64, u64, BTreeMap<(u32, u32), u64>, BTreeMap<String, u64>, BTreeMap<String, u64>);
    let locks = lock_names(stacks);
    let mut by: BTreeMap<String, Sums> = BTreeMap::new();
    for s in stacks {
        let Some(mut o) = object_of(s) else { continue };
        let mut raw = s.object.clone().filter(|r| *r != o);
        if let Some(name) = locks.get((s.pid, pgen_of(s.pgen)), &o) {
            raw = Some(std::mem::replace(&mut o, name.to_string()));
        }
        let e = by.entry(o).or_default();
        e.0 += s.ns;
        e.1 += s.count;
        *e.2.entry((s.pid, s.tid)).or_default() += s.ns;
        *e.3.entry(site(s)).or_default() += s.ns;
        if let Some(r) = raw {
            *e.4.entry(r).or_default() += s.ns;
        }
    }
    let mut v: Vec<WaitedOn> = by
        .into_iter()
        .map(|(object, (ns, count, threads, sites, raw))| WaitedOn {
            object,
            ns,
            count,
            raw: top(raw, 3).into_iter().map(|(r, _)| r).collect(),
            threads: top(threads, 3)
                .into_iter()
                .map(|((pid, tid), ns)| WaiterThread { pid, tid, comm: comms.get(&(pid, tid)).cloned().unwrap_or_default(), ns })
                .collect(),
            sites: top(sites, 3).into_iter().map(|(site, ns)| WaitSite { site, ns }).collect(),
        })
        .collect();
    v.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.object.cmp(&b.object)));
    v.truncate(n);
    v
}

/// The names by call site of the locks an unmerged stream gives by their
/// address.
fn lock_names(stacks: &[&Stack]) -> LockNames {
    let mut sites = LockSites::default();
    for s in stacks {
        if let Some(o) = object_of(s) {
            sites.add((s.pid, pgen_of(s.pgen)), &o, s.frames.iter().rev(), s.ns);
        }
    }
    sites.names()
}

#[cfg(test)]
mod tests {
    use super::*;
    use wallclock_stream::{Frame, State};

    fn off(tid: u32, frames: &[&str], object: Option<&str>, ns: u64) -> Stack {
        let mut s = Stack::new(Kind::Off, 1, tid, "t");
        s.state = Some(State::S);
        s.frames = frames.iter().map(|f| Frame::named(*f)).collect();
        s.object = object.map(str::to_string);
        s.ns = ns;
        s.count = 1;
        s
    }

    #[test]
    fn objects_by_time_from_field_or_frame() {
        let a = off(2, &["main", "reader", "read", "[sleep]", "[tcp 127.0.0.1:5432]"], None, 300);
        let b = off(3, &["main", "flush", "fdatasync"], Some("file /var/x"), 500);
        let c = off(3, &["main", "flush", "fdatasync"], None, 900);
        let d = off(2, &["main", "reader", "read", "[sleep]", "[tcp 127.0.0.1:5432]"], None, 100);
        let comms = BTreeMap::from([((1, 2), "reader".to_string()), ((1, 3), "flusher".to_string())]);
        let w = waited_on(&[&a, &b, &c, &d], &comms, 10);
        assert_eq!(w.len(), 2);
        assert_eq!((w[0].object.as_str(), w[0].ns, w[0].count), ("file /var/x", 500, 1));
        assert_eq!((w[1].object.as_str(), w[1].ns, w[1].count), ("tcp 127.0.0.1:5432", 400, 2));
        assert_eq!(w[1].threads[0].comm, "reader");
        assert_eq!(w[1].sites[0].site, "read ← reader ← main");
    }

    /// A lock known by its address: named by its heaviest call site, in
    /// a merged stream (the frame, the field its address) as in an
    /// unmerged one (the field only), the address kept.
    #[test]
    fn a_heap_lock_by_its_call_site_with_its_address() {
        let a = off(2, &["main", "withdraw", "pthread_mutex_lock"], Some("lock 0x7f0010"), 300);
        let b = off(3, &["main", "audit", "pthread_mutex_lock"], Some("lock 0x7f0010"), 100);
        let w = waited_on(&[&a, &b], &BTreeMap::new(), 10);
        assert_eq!((w[0].object.as_str(), w[0].ns, w[0].raw.clone()), ("lock in withdraw", 400, vec!["lock 0x7f0010".to_string()]));
        let merged = off(2, &["main", "withdraw", "pthread_mutex_lock", "[sleep]", "[lock in withdraw]"], Some("lock 0x7f0010"), 300);
        let w = waited_on(&[&merged], &BTreeMap::new(), 10);
        assert_eq!((w[0].object.as_str(), w[0].raw.clone()), ("lock in withdraw", vec!["lock 0x7f0010".to_string()]));
    }
}
