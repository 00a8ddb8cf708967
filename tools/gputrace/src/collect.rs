//! Turns what the injection library wrote (one text file per process, see
//! `cupti_inject`'s docs for the line format) into stream records: one
//! `Maps` record per process and `gpu` Stack records, each GPU activity
//! summed under the launch stack of the API call that issued it.
//!
//! The join is exact: an activity's correlation id names the API call that
//! issued it; the injection library recorded, for that (pid, tid,
//! correlation id), the stack of the outermost API call in progress. No
//! timestamp is used to match anything.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use wallclock_stream::{GpuInfo, Kind, MapEntry, Maps, Record, Slice, SliceStack, Stack};

/// What came out of the files.
#[derive(Debug, Default)]
pub struct Collected {
    pub records: Vec<Record>,
    /// Totals and losses, for the Stats trailer (`gpu_*` names).
    pub counts: BTreeMap<String, u64>,
    /// The injection library's notes, deduplicated.
    pub notes: Vec<String>,
    /// Why CUPTI was unusable (`W` lines), deduplicated.
    pub warnings: Vec<String>,
    /// CUPTI's last clock-end mark seen (`X` line), ns.
    pub end_ns: Option<u64>,
    /// An attach window's start (`R` line), ns.
    pub start_ns: Option<u64>,
    /// Each activity with its times: `slice_stack` and `slice` records
    /// (written with --timeline).
    pub timeline: Vec<Record>,
}

/// The id of a launch stack's `slice_stack`: the top bit set, so that it
/// never meets offcputime's ids (numbered from 1) in one trace.
fn slice_stack_id(pid: u32, sid: u32) -> u64 {
    1 << 63 | (pid as u64) << 32 | sid as u64
}

struct Act {
    activity: &'static str,
    name: String,
    corr: u32,
    start: u64,
    end: u64,
    device: Option<u32>,
    stream: Option<u32>,
}

#[derive(Default)]
struct Agg {
    ns: u64,
    count: u64,
    delay: u64,
    delays: u64,
}

fn copy_kind(k: u32) -> &'static str {
    match k {
        1 => "HtoD",
        2 => "DtoH",
        3 => "HtoA",
        4 => "AtoH",
        5 => "AtoA",
        6 => "AtoD",
        7 => "DtoA",
        8 => "DtoD",
        9 => "HtoH",
        10 => "PtoP",
        _ => "unknown",
    }
}

fn sync_name(t: u32) -> &'static str {
    match t {
        1 => "[sync event]",
        2 => "[sync stream-wait-event]",
        3 => "[sync stream]",
        4 => "[sync device]",
        _ => "[sync]",
    }
}

/// Demangled kernel name; the raw one when it is not an Itanium name.
pub fn demangle(name: &str) -> String {
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(s) = sym.demangle() {
                return s;
            }
        }
    }
    name.to_string()
}

fn add(counts: &mut BTreeMap<String, u64>, k: &str, v: u64) {
    *counts.entry(k.to_string()).or_default() += v;
}

/// Converts the files of all processes: `(pid, text)` pairs.
pub fn collect(files: &[(u32, String)]) -> Collected {
    let mut c = Collected::default();
    for (pid, text) in files {
        collect_one(*pid, text, &mut c);
    }
    add(&mut c.counts, "gpu_processes", files.len() as u64);
    c
}

fn collect_one(pid: u32, text: &str, c: &mut Collected) {
    let mut p = Parsed::default();
    for line in text.lines() {
        if !p.line(line, c) {
            p.bad_lines += 1;
        }
    }
    p.finish(pid, c);
}

/// One process's file as read, before the join.
#[derive(Default)]
struct Parsed {
    /// Launch stacks by their id (`S` lines).
    stacks: HashMap<u32, Vec<u64>>,
    /// Correlation id -> (tid, stack id) of the outermost call (`L`).
    launches: HashMap<u32, (u32, u32)>,
    /// Correlation id -> (tid, start) of the API call (`A`).
    api: HashMap<u32, (u32, u64)>,
    /// Correlation id -> (tid, start) of a call entered in the window (`L` with a start).
    entered: HashMap<u32, (u32, u64)>,
    comms: HashMap<u32, String>,
    acts: Vec<Act>,
    maps: Vec<MapEntry>,
    bad_lines: u64,
    /// Attached with the API callbacks on (`R START 1`): every call entered
    /// since has its `L` line (when it launches, copies, sets or waits), so
    /// an activity with none whose correlation id (numbered as calls are
    /// entered) is below every `L` line's was launched by a call entered
    /// before the window. One above (a call the callback did not take for
    /// a launch) is kept, unmatched.
    windowed: bool,
}

impl Parsed {
    /// Reads one line; false when it is not one the format has.
    fn line(&mut self, line: &str, c: &mut Collected) -> bool {
        let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
        let f: Vec<&str> = rest.split(' ').collect();
        if let Some(ok) = self.activity(tag, &f, c) {
            return ok;
        }
        let n = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok());
        match tag {
            "V" => {
                if f.get(1) == Some(&"calibrated") {
                    note(c, "CUPTI has no timestamp callback: GPU times calibrated to CLOCK_MONOTONIC");
                }
                true
            }
            "N" => {
                note(c, rest);
                true
            }
            "W" => {
                if !c.warnings.iter().any(|n| n == rest) {
                    c.warnings.push(rest.to_string());
                }
                add(&mut c.counts, "gpu_cupti_unavailable", 1);
                true
            }
            "T" => match (n(0), f.get(1)) {
                (Some(tid), Some(_)) => {
                    self.comms.insert(tid as u32, rest.split_once(' ').map(|x| x.1).unwrap_or("").to_string());
                    true
                }
                _ => false,
            },
            "S" => match (n(0), f.get(1)) {
                (Some(sid), Some(addrs)) => {
                    let v: Option<Vec<u64>> = if addrs.is_empty() {
                        Some(Vec::new())
                    } else {
                        addrs.split(',').map(|a| u64::from_str_radix(a, 16).ok()).collect()
                    };
                    v.map(|v| self.stacks.insert(sid as u32, v)).is_some()
                }
                _ => false,
            },
            "L" => match (n(0), n(1), n(2)) {
                (Some(tid), Some(corr), Some(sid)) => {
                    self.launches.entry(corr as u32).or_insert((tid as u32, sid as u32));
                    // `L TID CORR SID START`: the call's start, for the launch delay.
                    if let (Some(start), None) = (n(3), f.get(4)) {
                        self.entered.entry(corr as u32).or_insert((tid as u32, start));
                    }
                    true
                }
                _ => false,
            },
            "A" => match (n(3), n(4), n(5)) {
                (Some(tid), Some(corr), Some(start)) => {
                    self.api.insert(corr as u32, (tid as u32, start));
                    add(&mut c.counts, "gpu_api_calls", 1);
                    true
                }
                _ => false,
            },
            "O" => match (n(1), n(2)) {
                (Some(s), Some(e)) => {
                    add(&mut c.counts, "gpu_cupti_overhead_ns", e.saturating_sub(s));
                    true
                }
                _ => false,
            },
            "D" => n(0).map(|d| add(&mut c.counts, "gpu_records_dropped", d)).is_some(),
            "M" => {
                let h = |i: usize| f.get(i).and_then(|s| u64::from_str_radix(s, 16).ok());
                match (h(0), h(1), h(2), f.get(3)) {
                    (Some(start), Some(end), Some(offset), Some(_)) => {
                        self.maps.push(MapEntry { start, end, offset, path: f[3..].join(" "), build_id: None });
                        true
                    }
                    _ => false,
                }
            }
            "R" => {
                self.windowed |= f.get(1) == Some(&"1");
                n(0).map(|t| c.start_ns = Some(c.start_ns.map_or(t, |x| x.min(t)))).is_some()
            }
            "X" => {
                if let Some(e) = n(0) {
                    c.end_ns = Some(c.end_ns.map_or(e, |x| x.max(e)));
                }
                true
            }
            "" => true,
            _ => false,
        }
    }

    /// An activity line (`K` kernel, `C` copy, `E` memset, `Y` sync), each
    /// `CORR START END X STREAM ...`; None for any other tag.
    fn activity(&mut self, tag: &str, f: &[&str], c: &mut Collected) -> Option<bool> {
        if !matches!(tag, "K" | "C" | "E" | "Y") {
            return None;
        }
        let n = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok());
        let (Some(corr), Some(start), Some(end), Some(x), Some(st)) = (n(0), n(1), n(2), n(3), n(4)) else {
            return Some(false);
        };
        let (activity, name, device, stream) = match tag {
            // `K CORR START END DEVICE STREAM CONTEXT NAME...`
            "K" if f.len() > 6 => ("kernel", demangle(&f[6..].join(" ")), Some(x as u32), Some(st as u32)),
            // `C CORR START END DEVICE STREAM KIND BYTES`
            "C" => match n(5) {
                Some(k) => {
                    add(&mut c.counts, "gpu_memcpy_bytes", n(6).unwrap_or(0));
                    ("memcpy", format!("[memcpy {}]", copy_kind(k as u32)), Some(x as u32), Some(st as u32))
                }
                None => return Some(false),
            },
            "E" => ("memset", "[memset]".to_string(), Some(x as u32), Some(st as u32)),
            // `Y CORR START END TYPE STREAM`: stream 0 is none.
            "Y" => ("sync", sync_name(x as u32).to_string(), None, (st != 0).then_some(st as u32)),
            _ => return Some(false),
        };
        self.acts.push(Act { activity, name, corr: corr as u32, start, end, device, stream });
        Some(true)
    }

    /// The records: maps, then each activity under its launch stack, summed
    /// (and one slice each for the timeline).
    fn finish(mut self, pid: u32, c: &mut Collected) {
        if self.bad_lines > 0 {
            add(&mut c.counts, "gpu_bad_lines", self.bad_lines);
        }
        if !self.maps.is_empty() {
            let maps = std::mem::take(&mut self.maps);
            c.records.push(Record::Maps(Maps { pid, maps, names: Vec::new(), pgen: None }));
        }
        add(&mut c.counts, "gpu_launch_stacks", self.stacks.len() as u64);
        let (agg, used) = self.join(pid, c);
        for sid in used {
            let ustack = self.stacks.get(&sid).cloned().unwrap_or_default();
            let ss = SliceStack { id: slice_stack_id(pid, sid), pid, ustack, kstack: Vec::new(), frames: Vec::new(), object: None };
            c.timeline.insert(0, Record::SliceStack(ss));
        }
        for ((tid, sid, activity, name, device, stream), a) in agg {
            let comm = self.comms.get(&tid).map(String::as_str).unwrap_or("");
            let mut s = Stack::new(Kind::Gpu, pid, tid, comm);
            s.ustack = self.stacks.get(&sid).cloned().unwrap_or_default();
            s.ns = a.ns;
            s.count = a.count;
            s.gpu = Some(GpuInfo {
                activity: activity.to_string(),
                device,
                stream,
                launch_delay_ns: (a.delays > 0).then_some(a.delay),
                name: Some(name),
            });
            c.records.push(Record::Stack(s));
        }
    }

    /// Each activity joined to its launch by correlation id: one timeline
    /// slice each, the sums by key, and the stack ids used.
    fn join(&mut self, pid: u32, c: &mut Collected) -> (BTreeMap<Key, Agg>, BTreeSet<u32>) {
        let mut agg: BTreeMap<Key, Agg> = BTreeMap::new();
        let mut used = BTreeSet::new();
        let first_seen = self.launches.keys().min().copied();
        for a in std::mem::take(&mut self.acts) {
            if self.windowed && !self.launches.contains_key(&a.corr) && first_seen.is_none_or(|f| a.corr < f) {
                add(&mut c.counts, "gpu_launched_before_window", 1);
                continue;
            }
            let ns = a.end.saturating_sub(a.start);
            add(&mut c.counts, &format!("gpu_{}_count", a.activity), 1);
            add(&mut c.counts, &format!("gpu_{}_ns", a.activity), ns);
            let call = self.api.get(&a.corr).or_else(|| self.entered.get(&a.corr)).copied();
            let (tid, sid) = match self.launches.get(&a.corr) {
                Some(&(tid, sid)) => {
                    if call.is_some_and(|(t, _)| t != tid) {
                        add(&mut c.counts, "gpu_tid_mismatch", 1);
                    }
                    (tid, sid)
                }
                None => {
                    add(&mut c.counts, "gpu_unmatched", 1);
                    (call.map_or(0, |(t, _)| t), 0)
                }
            };
            let mut sl = Slice::new(Kind::Gpu, pid, tid, a.start, a.end.max(a.start));
            if sid != 0 && self.stacks.contains_key(&sid) {
                sl.stack = Some(slice_stack_id(pid, sid));
                used.insert(sid);
            }
            sl.gpu = Some(GpuInfo {
                activity: a.activity.to_string(),
                device: a.device,
                stream: a.stream,
                launch_delay_ns: call.filter(|&(_, s)| a.activity != "sync" && s > 0 && a.start >= s).map(|(_, s)| a.start - s),
                name: Some(a.name.clone()),
            });
            c.timeline.push(Record::Slice(sl));
            let e = agg.entry((tid, sid, a.activity, a.name, a.device, a.stream)).or_default();
            e.ns += ns;
            e.count += 1;
            if let Some((_, api_start)) = call.filter(|_| a.activity != "sync") {
                if a.start >= api_start && api_start > 0 {
                    e.delay += a.start - api_start;
                    e.delays += 1;
                }
            }
        }
        (agg, used)
    }
}

/// (tid, sid, activity, name, device, stream) -> sums; sid 0: no stack.
type Key = (u32, u32, &'static str, String, Option<u32>, Option<u32>);

fn note(c: &mut Collected, s: &str) {
    if !c.notes.iter().any(|n| n == s) {
        c.notes.push(s.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attach_window_leaves_out_what_was_launched_before_it() {
        // Call 11 was entered before the callbacks were on: its kernel
        // has no L line. Call 12 was entered inside the window.
        let text = "V 28 monotonic\nT 5 app\nS 1 10,20\nR 300 1\nL 5 12 1 310\n\
                    K 11 305 390 0 7 0 early\nK 12 400 450 0 7 0 inside\nX 500\n";
        let c = collect(&[(7, text.to_string())]);
        let names: Vec<_> = c.records.iter().filter_map(|r| if let Record::Stack(s) = r { s.gpu.as_ref()?.name.clone() } else { None }).collect();
        assert_eq!(names, ["inside"]);
        assert_eq!(c.counts["gpu_launched_before_window"], 1);
        assert_eq!((c.counts["gpu_kernel_count"], c.counts.get("gpu_unmatched")), (1, None));
        assert_eq!(c.timeline.iter().filter(|r| matches!(r, Record::Slice(_))).count(), 1);
        // A call entered in the window that the callback did not take for a
        // launch (13, after 12): its kernel is kept, unmatched.
        let c = collect(&[(7, text.replace("X 500", "K 13 460 470 0 7 0 other\nX 500"))]);
        assert_eq!((c.counts["gpu_kernel_count"], c.counts["gpu_unmatched"], c.counts["gpu_launched_before_window"]), (2, 1, 1));
        // Without callbacks (`R START 0`, or an older file's `R START`),
        // nothing says when a launch began: it is kept, unmatched.
        for r in ["R 300 0", "R 300"] {
            let c = collect(&[(7, text.replace("R 300 1", r))]);
            assert_eq!((c.counts["gpu_kernel_count"], c.counts["gpu_unmatched"]), (2, 1), "{r}");
            assert_eq!(c.counts.get("gpu_launched_before_window"), None);
        }
    }

    #[test]
    fn joins_by_correlation_id_not_time() {
        // Kernel 11 ran while call 12 was in progress, but belongs to 11.
        let text = "V 28 monotonic\nT 5 app\nS 1 10,20\nS 2 10,30\nL 5 11 1 2 211 cudaLaunchKernel\n\
                    L 5 12 2 1 307 cuLaunchKernel\nA 2 211 7 5 11 100 200\nA 1 307 7 5 12 300 400\n\
                    K 11 310 390 0 7 0 _Z4gemmPfi\nK 12 400 450 0 7 0 relu\nK 99 500 510 0 7 0 lost\nD 3\n";
        let c = collect(&[(7, text.to_string())]);
        let stacks: Vec<&Stack> = c.records.iter().filter_map(|r| if let Record::Stack(s) = r { Some(s) } else { None }).collect();
        let gemm = stacks.iter().find(|s| s.gpu.as_ref().unwrap().name.as_deref() == Some("gemm(float*, int)")).unwrap();
        assert_eq!(gemm.ustack, vec![0x10, 0x20]);
        assert_eq!(gemm.ns, 80);
        assert_eq!(gemm.gpu.as_ref().unwrap().launch_delay_ns, Some(210));
        let relu = stacks.iter().find(|s| s.gpu.as_ref().unwrap().name.as_deref() == Some("relu")).unwrap();
        assert_eq!(relu.ustack, vec![0x10, 0x30]);
        let lost = stacks.iter().find(|s| s.gpu.as_ref().unwrap().name.as_deref() == Some("lost")).unwrap();
        assert!(lost.ustack.is_empty());
        assert_eq!(c.counts["gpu_unmatched"], 1);
        assert_eq!(c.counts["gpu_records_dropped"], 3);
        assert_eq!(c.counts["gpu_kernel_ns"], 140);
    }

    #[test]
    fn launch_delay_from_the_calls_own_start() {
        let text = "V 28 monotonic\nT 5 app\nS 1 10,20\nL 5 11 1 100\nL 5 12 1 150\nK 11 310 390 0 7 0 k\n";
        let c = collect(&[(7, text.to_string())]);
        let s = c.records.iter().find_map(|r| if let Record::Stack(s) = r { Some(s) } else { None }).unwrap();
        assert_eq!(s.gpu.as_ref().unwrap().launch_delay_ns, Some(210));
        assert_eq!(s.ustack, vec![0x10, 0x20]);
        assert_eq!(c.counts.get("gpu_unmatched"), None);
    }
}
