//! From the BPF maps and stack events to stream records.

use std::collections::BTreeMap;

use wallclock_capture::event::{self, WcOkey, WcOval, WcThread};
use wallclock_capture::session::{state_from_letter, Session};
use wallclock_capture::{procfs, unwind::Unwind};

pub use crate::stacks::Stacks;
use crate::wakers::{self, Wakes};
use wallclock_stream::{accounting, Frame, Kind, Record, StateNs, Stack, State, Stats, Thread};

/// Synthetic stacks. Time is never dropped: what has no stack, or what a
/// filter the user asked for leaves out, stays in the thread's totals here.
pub const LOST: &str = "[lost stack]";
pub const OVER_MAX: &str = "[filtered: over -M]";
pub const STATE_FILTERED: &str = "[filtered: --state]";

pub struct Config {
    pub start: u64,
    pub end: u64,
    /// Blocks under this are counted as short in the stats (nothing else).
    pub min_block_ns: u64,
    pub max_block_ns: u64,
    /// `--state`: the state whose blocks keep their stacks.
    pub state: Option<State>,
    /// Stacks read from /proc at the stop (see `atstop`).
    pub read_at_stop: u64,
    /// `--wakers`: the chain depth (`--wake-depth`).
    pub wake_depth: Option<u32>,
}

impl Config {
    /// The filter bucket of a block the user-space side closes (one open
    /// at the stop, one begun before the start), as the BPF side decides
    /// for the others.
    fn filtered(&self, s: State, ns: u64) -> Option<&'static str> {
        if ns > self.max_block_ns {
            Some(OVER_MAX)
        } else if self.state.is_some_and(|w| w != s) {
            Some(STATE_FILTERED)
        } else {
            None
        }
    }
}

/// The state `--state N` keeps (N is a task __state, as for bcc).
pub fn state_of_raw(n: i64) -> State {
    match n {
        0 => State::R,
        n if n & 1 != 0 => State::S,
        n if n & 0x400 != 0 => State::Other,
        n if n & 2 != 0 => State::D,
        _ => State::Other,
    }
}

fn st(s: u32) -> State {
    match s {
        event::ST_R => State::R,
        event::ST_S => State::S,
        event::ST_D => State::D,
        _ => State::Other,
    }
}

#[derive(PartialEq, Eq, PartialOrd, Ord, Clone, Debug)]
pub(crate) enum Where {
    Stack(crate::stacks::Addrs, crate::stacks::Addrs),
    Synthetic(&'static str),
}

#[derive(Default)]
struct Acc {
    /// (tid, state, where) -> (ns, count)
    stacks: BTreeMap<(u32, State, Where), (u64, u64)>,
    /// Blocks and ns per synthetic stack.
    synthetic: BTreeMap<&'static str, (u64, u64)>,
}

impl Acc {
    fn add(&mut self, tid: u32, s: State, w: Where, ns: u64, count: u64) {
        if let Where::Synthetic(name) = w {
            let e = self.synthetic.entry(name).or_default();
            e.0 += count;
            e.1 += ns;
        }
        let e = self.stacks.entry((tid, s, w)).or_default();
        e.0 += ns;
        e.1 += count;
    }
}

/// The dumped off-CPU maps: blocks, and (--wakers) blocks by waker.
pub struct OffMaps<'a> {
    pub offcpu: &'a [(Vec<u8>, Vec<u8>)],
    pub offwake: &'a [(Vec<u8>, Vec<u8>)],
}

pub fn records(
    cfg: &Config,
    sess: &Session,
    unwind: &Unwind,
    stacks: &Stacks,
    threads: &[(u32, WcThread)],
    maps: &OffMaps,
    counts: &[u64],
) -> Vec<Record> {
    let (offcpu, offwake) = (maps.offcpu, maps.offwake);
    let (start, end) = (cfg.start, cfg.end);
    let mut acc = Acc::default();
    let init_state = |tid: u32| match sess.initial.get(&tid) {
        Some(i) => state_from_letter(i.state),
        None => State::Other,
    };
    let init_where = |tid: u32, ns: u64, count: u64| {
        if let Some(f) = cfg.filtered(init_state(tid), ns / count.max(1)) {
            return Where::Synthetic(f);
        }
        match sess.initial.get(&tid) {
            Some(i) if !i.ustack.is_empty() || !i.kstack.is_empty() => Where::Stack(i.ustack.as_slice().into(), i.kstack.as_slice().into()),
            _ => Where::Synthetic(LOST),
        }
    };
    let fp_where = |fp: u64| match fp {
        event::FP_NEWTHREAD => Where::Synthetic("[thread start]"),
        event::FP_OVER_MAX => Where::Synthetic(OVER_MAX),
        event::FP_STATE_FILTERED => Where::Synthetic(STATE_FILTERED),
        fp => match stacks.get(fp) {
            Some((u, k)) if !u.is_empty() || !k.is_empty() => Where::Stack(u.clone(), k.clone()),
            _ => Where::Synthetic(LOST),
        },
    };

    let block_of = |tid: u32, fp: u64, state: u32, ns: u64, count: u64| {
        if state == event::ST_INIT {
            (init_state(tid), init_where(tid, ns, count))
        } else {
            (st(state), fp_where(fp))
        }
    };
    let add_key = |acc: &mut Acc, tid: u32, fp: u64, state: u32, ns: u64, count: u64| {
        let (s, w) = block_of(tid, fp, state, ns, count);
        acc.add(tid, s, w, ns, count);
    };
    // Threads the kernel keeps from BPF: what it showed of them is not
    // their time (see wallclock_capture::hidden).
    let hidden = sess.hidden(threads, end);
    let hid: std::collections::HashSet<u32> = hidden.iter().map(|h| h.tid).collect();
    let mut wakes = Wakes::default();
    for (tid, fp, state, k, ns, count) in Wakes::parse(offwake) {
        if hid.contains(&tid) {
            continue;
        }
        let (s, w) = block_of(tid, fp, state, ns, count);
        wakes.add((tid, s, w), k, ns, count);
    }
    for (k, v) in offcpu {
        let (Some(k), Some(v)) = (event::from_bytes::<WcOkey>(k), event::from_bytes::<WcOval>(v)) else { continue };
        if !hid.contains(&k.tid) {
            add_key(&mut acc, k.tid, k.fp, k.state, v.ns, v.count);
        }
    }

    let mut out_threads = BTreeMap::new();
    let comm_of = |pid: u32, tid: u32, fallback: &str| {
        procfs::comm(pid, tid).or_else(|| stacks.comm(tid)).unwrap_or_else(|| fallback.to_string())
    };
    let mut short = [(0u64, 0u64); 4];
    let mut missed_at_stop = 0u64;
    for &(tid, mut th) in threads.iter().filter(|(tid, _)| !hid.contains(tid)) {
        for i in 0..2 {
            if th.pend_cnt[i] > 0 {
                add_key(&mut acc, tid, th.pend_fp[i], th.pend_state[i], th.pend_ns[i], th.pend_cnt[i]);
            }
        }
        if th.lost_ns[event::ST_INIT as usize] > 0 {
            acc.add(tid, init_state(tid), Where::Synthetic(LOST), th.lost_ns[event::ST_INIT as usize], 1);
        }
        let t_end = if th.exit_ns > 0 { th.exit_ns.min(end) } else { end };
        let bpf_th = th; // as the BPF side left it, before the open slice is closed below
        if th.exit_ns == 0 && th.last_ts < end {
            // Close what is still open at the stop.
            let d = end - th.last_ts;
            if th.running != 0 {
                // A switch-out never seen: what the clock did not count
                // was off-CPU somewhere unknown.
                let (on, off) = sess.open_slice(tid, &th, end);
                th.on_ns += on;
                if off > 0 {
                    th.off_ns[event::ST_OTHER as usize] += off;
                    acc.add(tid, State::Other, Where::Synthetic(LOST), off, 1);
                    missed_at_stop += 1;
                }
            } else if th.cur_state == event::ST_INIT {
                // Blocked from the start to the stop, its stack from /proc.
                th.off_ns[event::ST_INIT as usize] += d;
                acc.add(tid, init_state(tid), init_where(tid, d, 1), d, 1);
            } else {
                let s = th.cur_state.min(3);
                th.off_ns[s as usize] += d;
                if d < cfg.min_block_ns {
                    th.short_ns[s as usize] += d;
                    th.short_cnt[s as usize] += 1;
                }
                let w = match cfg.filtered(st(s), d) {
                    Some(f) => Where::Synthetic(f),
                    None => fp_where(th.cur_fp),
                };
                acc.add(tid, st(s), w, d, 1);
            }
        }
        let mut off = StateNs::default();
        for (i, sh) in short.iter_mut().enumerate() {
            *off.get_mut(st(i as u32)) += th.off_ns[i];
            sh.0 += th.short_cnt[i];
            sh.1 += th.short_ns[i];
            if th.lost_ns[i] > 0 {
                acc.add(tid, st(i as u32), Where::Synthetic(LOST), th.lost_ns[i], 1);
            }
        }
        *off.get_mut(init_state(tid)) += th.off_ns[event::ST_INIT as usize];
        let comm = if th.exit_ns > 0 { event::comm_str(&th.comm) } else { comm_of(th.pid, tid, &event::comm_str(&th.comm)) };
        let mut t = Thread::new(th.pid, tid, &comm);
        t.start_ns = Some(th.begin_ns);
        t.end_ns = Some(t_end);
        t.on_ns = Some(th.on_ns);
        t.steal_ns = Some(sess.steal_of(tid, &bpf_th, end, th.on_ns));
        t.off_ns = Some(off);
        out_threads.insert(tid, t);
    }
    // Threads blocked from the start to the stop never switched: all off-CPU.
    for (&tid, i) in &sess.initial {
        if out_threads.contains_key(&tid) || !procfs::exists(i.pid) {
            continue;
        }
        let s = state_from_letter(i.state);
        let mut off = StateNs::default();
        *off.get_mut(s) = end - start;
        acc.add(tid, s, init_where(tid, end - start, 1), end - start, 1);
        let mut t = Thread::new(i.pid, tid, &comm_of(i.pid, tid, &i.comm));
        t.start_ns = Some(start);
        t.end_ns = Some(end);
        t.on_ns = Some(0);
        t.steal_ns = Some(0);
        t.off_ns = Some(off);
        out_threads.insert(tid, t);
    }

    for h in &hidden {
        let mut off = StateNs::default();
        *off.get_mut(State::Other) = h.off_ns;
        acc.add(h.tid, State::Other, Where::Synthetic(wallclock_capture::hidden::FRAME), h.off_ns, 1);
        let mut t = Thread::new(h.pid, h.tid, &h.comm);
        t.start_ns = Some(start);
        t.end_ns = Some(end);
        t.on_ns = Some(h.on_ns);
        t.steal_ns = Some(0);
        t.off_ns = Some(off);
        out_threads.insert(h.tid, t);
    }

    unwind.python.name_threads(out_threads.values_mut());
    let mut stats = stats(cfg, counts, &acc, &short, out_threads.len());
    *stats.counts.entry("missed_switches".into()).or_default() += missed_at_stop;
    stats.counts.insert("hidden_threads".into(), hidden.len() as u64);
    if cfg.wake_depth.is_some() {
        let orphans = wakes.by_block.keys().filter(|b| !acc.stacks.contains_key(b)).count();
        stats.counts.insert("waker_orphan_blocks".into(), orphans as u64);
    }
    let mut header = sess.header("offcputime", env!("CARGO_PKG_VERSION"), end);
    header.min_block_ns = Some(cfg.min_block_ns);
    for k in ["lost_stacks", "lost_stack_ns", "map_full"] {
        let v = stats.counts[k];
        if v > 0 {
            header.lost.insert(k.to_string(), v);
        }
    }

    let mut recs = vec![Record::Header(header)];
    recs.extend(unwind.maps_records().into_iter().map(Record::Maps));
    for t in out_threads.values() {
        recs.push(Record::Thread(t.clone()));
    }
    recs.extend(out_threads.values().filter_map(accounting::steal_stack).map(Record::Stack));
    let thread_of = |tid: u32| out_threads.get(&tid).map(|t| (t.pid, t.comm.clone()));
    let wblock_of = |tid: u32, fp: u64, state: u32| Some(block_of(tid, fp, state, 0, 1));
    let wcx = wakers::Ctx { stacks, wakes: &wakes, block_of: &wblock_of, thread: &thread_of };
    for ((tid, state, w), (ns, count)) in &acc.stacks {
        let (pid, comm) = thread_of(*tid).unwrap_or_default();
        let mut s = Stack::new(Kind::Off, pid, *tid, &comm);
        s.state = Some(*state);
        match w {
            Where::Stack(u, k) => {
                s.ustack = u.to_vec();
                s.kstack = k.to_vec();
            }
            Where::Synthetic(name) => s.frames = vec![Frame::named(*name)],
        }
        let (split, left_ns, left_count) = match cfg.wake_depth {
            Some(_) => wakes.split(&(*tid, *state, w.clone()), *ns, *count),
            None => (Vec::new(), *ns, *count),
        };
        let whole = split.is_empty();
        // Wake-ups BPF told apart (an interrupt's fingerprint holds a
        // little of what it interrupted) may be one waker here.
        let mut by_waker: BTreeMap<wallclock_stream::Waker, (u64, u64)> = BTreeMap::new();
        for (k, wns, wcount) in split {
            let e = by_waker.entry(wakers::waker(&wcx, &k, cfg.wake_depth.unwrap_or(1))).or_default();
            e.0 += wns;
            e.1 += wcount;
        }
        for (w, (wns, wcount)) in by_waker {
            let mut ws = s.clone();
            ws.ns = wns;
            ws.count = wcount;
            ws.waker = Some(Box::new(w));
            recs.push(Record::Stack(ws));
        }
        if whole || left_ns > 0 || left_count > 0 {
            s.ns = left_ns;
            s.count = left_count;
            recs.push(Record::Stack(s));
        }
    }
    recs.push(Record::Stats(stats));
    recs
}

/// The trailer: the BPF counters, then what user space counted. Short
/// blocks (under -m) per state, count and ns: their time is under their
/// stacks, this says how much of it there was.
fn stats(cfg: &Config, counts: &[u64], acc: &Acc, short: &[(u64, u64); 4], threads: usize) -> Stats {
    let mut stats = Stats { end_ns: Some(cfg.end), counts: BTreeMap::new() };
    for (name, v) in event::STAT_NAMES.iter().zip(counts) {
        if *name != "samples" {
            stats.counts.insert(name.to_string(), *v);
        }
    }
    let c = &mut stats.counts;
    let syn = |name: &str| acc.synthetic.get(name).copied().unwrap_or_default();
    c.insert("lost_stacks".into(), syn(LOST).0);
    c.insert("lost_stack_ns".into(), syn(LOST).1);
    c.insert("over_max_blocks".into(), syn(OVER_MAX).0);
    c.insert("state_filtered_blocks".into(), syn(STATE_FILTERED).0);
    c.insert("stacks_read_at_stop".into(), cfg.read_at_stop);
    let (mut n, mut ns) = (0, 0);
    for (i, (cnt, t)) in short.iter().enumerate() {
        let s = ["R", "S", "D", "other"][i];
        c.insert(format!("short_blocks_{s}"), *cnt);
        c.insert(format!("short_blocks_ns_{s}"), *t);
        n += cnt;
        ns += t;
    }
    c.insert("short_blocks".into(), n);
    c.insert("short_blocks_ns".into(), ns);
    c.insert("threads".into(), threads as u64);
    stats
}
