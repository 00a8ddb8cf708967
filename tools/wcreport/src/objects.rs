//! What the off-CPU time waited on (stream 1.6's `object`, a frame after
//! the state leaf once merged): each object by time, with its heaviest
//! threads and call sites.

use std::collections::BTreeMap;

use serde::Serialize;
use wallclock_stream::{Kind, Stack};

/// One object and the time waited on it.
#[derive(Debug, Clone, Serialize)]
pub struct WaitedOn {
    /// As the capture named it: `file /path`, `tcp 127.0.0.1:5432`,
    /// `lock g_lock`, `child make 4242`...
    pub object: String,
    pub ns: u64,
    pub count: u64,
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

/// A stack's object: its field, else the frame after its state leaf.
pub fn object_of(s: &Stack) -> Option<String> {
    if s.kind != Kind::Off {
        return None;
    }
    if let Some(o) = &s.object {
        return Some(o.clone());
    }
    let funcs: Vec<&str> = s.frames.iter().map(|f| f.func.as_str()).collect();
    wallclock_stream::accounting::object_of(&funcs).map(str::to_string)
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
/// thread's stack) shows where it is taken most: its heaviest site.
pub fn waited_on(stacks: &[&Stack], comms: &BTreeMap<(u32, u32), String>, n: usize) -> Vec<WaitedOn> {
    type Sums = (u64, u64, BTreeMap<(u32, u32), u64>, BTreeMap<String, u64>);
    let mut by: BTreeMap<String, Sums> = BTreeMap::new();
    for s in stacks {
        let Some(o) = object_of(s) else { continue };
        let e = by.entry(o).or_default();
        e.0 += s.ns;
        e.1 += s.count;
        *e.2.entry((s.pid, s.tid)).or_default() += s.ns;
        *e.3.entry(site(s)).or_default() += s.ns;
    }
    let mut v: Vec<WaitedOn> = by
        .into_iter()
        .map(|(object, (ns, count, threads, sites))| WaitedOn {
            object,
            ns,
            count,
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
}
