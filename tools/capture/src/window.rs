//! `--every SECONDS`: one capture, cut into windows back to back. At each
//! window's end T the tool makes the records of the capture from its start
//! to T, as it would at a stop there (open intervals closed at T); the
//! window is the difference from the previous cut. The windows tile the
//! capture (each one's `end_ns` is the next one's `start_ns`) and add up to
//! the whole capture's records, whatever happens between the cuts: the BPF
//! side never restarts and nothing is reset.
//!
//! Window N (from 1) is written beside `-o FILE` as `FILE.N`, a complete
//! stream, once it is closed (written to `FILE.N.tmp`, then renamed: a
//! reader that waits for `FILE.N` never sees half of it); `FILE` gets the
//! whole capture, as without `--every`. The last window's number is also
//! written to `FILE.last` (before the window itself): a capture beside it
//! run with `--every-follow FILE` cuts where each window of FILE but the
//! last ends, so that the two captures' windows are the same.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use wallclock_stream::{Record, Stack, Thread, Writer};

/// The windows of a capture so far.
pub struct Windows {
    every_ns: u64,
    /// `--every-follow FILE`: cut when FILE.N appears, at its end.
    follow: Option<PathBuf>,
    path: PathBuf,
    /// Where the window now open began, and the records up to there.
    start: u64,
    prev: Vec<Record>,
    /// The machine's steal + irq + softirq (/proc/stat) at `start`: a
    /// window's threads never claim more steal than the machine counted
    /// over the window (the whole capture's cap does not bound a window).
    machine: Option<u64>,
    pub closed: u32,
}

impl Windows {
    /// `machine`: the machine's steal at `start` (crate::steal::machine_ns).
    pub fn new(every_s: f64, output: &Path, start: u64, machine: Option<u64>) -> Windows {
        let every_ns = (every_s * 1e9) as u64;
        Windows { every_ns, follow: None, path: output.to_path_buf(), start, prev: Vec::new(), machine, closed: 0 }
    }

    /// Windows that end where another capture's (`FILE.N`) end.
    pub fn following(leader: &Path, output: &Path, start: u64, machine: Option<u64>) -> Windows {
        Windows { follow: Some(leader.to_path_buf()), ..Windows::new(0.0, output, start, machine) }
    }

    /// When the window open since `start` ends, if it is over at `now`:
    /// `every` after its start, or where the leader's next window ended.
    pub fn due(&self, now: u64) -> Option<u64> {
        let Some(leader) = &self.follow else {
            return (now >= self.start + self.every_ns).then_some(now);
        };
        let n = self.closed + 1;
        // The leader's last window ends at its stop: ours ends at our own.
        let last = std::fs::read_to_string(format!("{}.last", leader.display()));
        if last.is_ok_and(|l| l.trim() == n.to_string()) {
            return None;
        }
        let next = PathBuf::from(format!("{}.{n}", leader.display()));
        let f = std::fs::File::open(next).ok()?;
        let mut r = wallclock_stream::Reader::new(std::io::BufReader::new(f), "", Default::default());
        match r.next() {
            Some(Ok(Record::Header(h))) => h.end_ns.filter(|&e| e > self.start),
            _ => None,
        }
    }

    /// Close the open window at `end`, given the capture's records from its
    /// start to `end`: write the window's file. The last one (at the stop)
    /// is named in FILE.last first, for followers. `machine`: the
    /// machine's steal read at `end`; the window's is capped to it.
    pub fn close(&mut self, end: u64, upto: Vec<Record>, last: bool, machine: Option<u64>) -> Result<()> {
        let mut win = delta(&self.prev, &upto, self.start, end);
        if let (Some(a), Some(b)) = (self.machine, machine) {
            crate::steal::cap_records(&mut win, b.saturating_sub(a));
        }
        self.closed += 1;
        let name = format!("{}.{}", self.path.display(), self.closed);
        let tmp = format!("{name}.tmp");
        let f = std::fs::File::create(&tmp).with_context(|| format!("creating {tmp}"))?;
        let mut w = Writer::from_env(std::io::BufWriter::new(f))?;
        // The BPF programs loaded (crate::bpfsyms), after the header.
        let mut ksyms = crate::bpfsyms::record();
        for r in &win {
            if !matches!(r, Record::Header(_)) {
                if let Some(k) = ksyms.take() {
                    w.write(&k)?;
                }
            }
            w.write(r)?;
        }
        w.flush()?;
        drop(w);
        if last && self.follow.is_none() {
            let marker = format!("{}.last", self.path.display());
            std::fs::write(&marker, format!("{}\n", self.closed)).with_context(|| format!("writing {marker}"))?;
        }
        std::fs::rename(&tmp, &name).with_context(|| format!("renaming {tmp} to {name}"))?;
        self.start = end;
        self.prev = upto;
        self.machine = machine;
        Ok(())
    }
}

/// A stack's identity: everything but its time.
fn key(s: &Stack) -> String {
    let mut k = s.clone();
    k.ns = 0;
    k.count = 0;
    if let Some(g) = k.gpu.as_mut() {
        g.launch_delay_ns = None;
    }
    serde_json::to_string(&k).unwrap_or_default()
}

/// The records of the window [start, end) from those of the capture up to
/// `start` (`prev`) and up to `end` (`cur`).
pub fn delta(prev: &[Record], cur: &[Record], start: u64, end: u64) -> Vec<Record> {
    let mut stacks: HashMap<String, (u64, u64)> = HashMap::new();
    let mut threads: HashMap<(u32, u32), &Thread> = HashMap::new();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for r in prev {
        match r {
            Record::Stack(s) => {
                let e = stacks.entry(key(s)).or_default();
                e.0 += s.ns;
                e.1 += s.count;
            }
            Record::Thread(t) => {
                threads.insert((t.pid, t.tid), t);
            }
            Record::Stats(s) => counts = s.counts.clone(),
            _ => {}
        }
    }
    let sub = |a: Option<u64>, b: Option<u64>| a.map(|a| a.saturating_sub(b.unwrap_or(0)));
    let mut out = Vec::new();
    for r in cur {
        match r {
            Record::Header(h) => {
                let mut h = h.clone();
                h.start_ns = Some(start);
                h.end_ns = Some(end);
                out.push(Record::Header(h));
            }
            Record::Thread(t) => {
                let mut w = t.clone();
                w.start_ns = Some(t.start_ns.unwrap_or(start).max(start));
                w.end_ns = Some(t.end_ns.unwrap_or(end).min(end));
                if w.end_ns <= w.start_ns {
                    continue; // gone before this window
                }
                if let Some(p) = threads.get(&(t.pid, t.tid)) {
                    w.on_ns = sub(t.on_ns, p.on_ns);
                    w.steal_ns = sub(t.steal_ns, p.steal_ns);
                    w.samples = sub(t.samples, p.samples);
                    if let (Some(o), Some(po)) = (w.off_ns.as_mut(), p.off_ns) {
                        for st in wallclock_stream::State::ALL {
                            *o.get_mut(st) = o.get(st).saturating_sub(po.get(st));
                        }
                    }
                }
                out.push(Record::Thread(w));
            }
            Record::Stack(s) => {
                let (pns, pcount) = stacks.get(&key(s)).copied().unwrap_or_default();
                let (ns, count) = (s.ns.saturating_sub(pns), s.count.saturating_sub(pcount));
                if ns > 0 || count > 0 {
                    let mut s = s.clone();
                    (s.ns, s.count) = (ns, count);
                    out.push(Record::Stack(s));
                }
            }
            Record::Stats(s) => {
                let mut s = s.clone();
                s.end_ns = Some(end);
                for (k, v) in s.counts.iter_mut() {
                    *v = v.saturating_sub(counts.get(k).copied().unwrap_or(0));
                }
                s.counts.insert("window".into(), 1);
                out.push(Record::Stats(s));
            }
            // (Captures write no stack table; definitions pass as they are.)
            Record::Maps(_) | Record::Ksyms(_) | Record::Frame(_) | Record::StackDef(_) => out.push(r.clone()),
            Record::Slice(_) | Record::SliceStack(_) | Record::Probe(_) | Record::Span(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upto(steal: &[(u32, u64)]) -> Vec<Record> {
        let mut v = vec![Record::Header(wallclock_stream::Header::new("offcputime", "0"))];
        for &(tid, s) in steal {
            let mut t = Thread::new(1, tid, "t");
            (t.on_ns, t.steal_ns) = (Some(1_000_000_000), Some(s));
            v.push(Record::Thread(t));
        }
        v
    }

    fn steal_of(path: &str) -> Vec<u64> {
        let text = std::fs::read_to_string(path).unwrap();
        let r = wallclock_stream::Reader::new(std::io::BufReader::new(text.as_bytes()), "", Default::default());
        r.filter_map(|r| match r.unwrap() {
            Record::Thread(t) => t.steal_ns,
            _ => None,
        })
        .collect()
    }

    #[test]
    fn each_window_capped_to_the_machines_steal_over_it() {
        let dir = std::env::temp_dir().join(format!("wc-window-cap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("w.jsonl");
        let mut w = Windows::new(1.0, &out, 0, Some(1_000));
        // Window 1: the threads claim 30 + 10 against the machine's 20.
        w.close(10, upto(&[(1, 30), (2, 10)]), false, Some(1_020)).unwrap();
        // Window 2: 6 + 2 more, under the machine's 100 there.
        w.close(20, upto(&[(1, 36), (2, 12)]), false, Some(1_120)).unwrap();
        // Window 3: the machine read nothing new.
        w.close(30, upto(&[(1, 40), (2, 12)]), true, Some(1_120)).unwrap();
        let p = |n: u32| format!("{}.{n}", out.display());
        assert_eq!(steal_of(&p(1)), vec![15, 5]);
        assert_eq!(steal_of(&p(2)), vec![6, 2]);
        assert_eq!(steal_of(&p(3)), vec![0, 0]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
