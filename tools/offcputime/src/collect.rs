//! From the BPF maps and stack events to stream records.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use wallclock_capture::event::{self, WcOkey, WcOval, WcThread};
use wallclock_capture::session::{state_from_letter, Session};
use wallclock_capture::{procfs, unwind::Unwind};

pub use crate::stacks::Stacks;
use crate::blocks::{Acc, Where};
use wallclock_capture::objects::{Namer, Obj};
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

/// What the records are made of.
pub struct Input<'a> {
    pub cfg: &'a Config,
    pub sess: &'a Session,
    pub unwind: &'a Unwind,
    pub stacks: &'a Stacks,
    /// The thread map: tid and the BPF side's accounting.
    pub threads: &'a [(u32, WcThread)],
    /// The dumped off-CPU maps: blocks, and (--wakers) blocks by waker.
    pub offcpu: &'a [(Vec<u8>, Vec<u8>)],
    /// Names what the blocks waited on (`objects`).
    pub names: &'a Namer,
    pub offwake: &'a [(Vec<u8>, Vec<u8>)],
    /// The BPF counters, as `event::STAT_NAMES`.
    pub counts: &'a [u64],
    /// The threads already written out during the capture (`early`).
    pub done: &'a Done,
}

/// What turns the BPF side's blocks into stacks and threads: the same at
/// the stop and for the threads written out during the capture (`early`).
pub(crate) struct Resolve<'a> {
    pub cfg: &'a Config,
    pub sess: &'a Session,
    pub stacks: &'a Stacks,
}

impl Resolve<'_> {
    fn init_state(&self, tid: u32) -> State {
        match self.sess.initial.get(&tid) {
            Some(i) => state_from_letter(i.state),
            None => State::Other,
        }
    }

    fn init_where(&self, tid: u32, ns: u64, count: u64) -> Where {
        if let Some(f) = self.cfg.filtered(self.init_state(tid), ns / count.max(1)) {
            return Where::Synthetic(f);
        }
        match self.sess.initial.get(&tid) {
            Some(i) if !i.ustack.is_empty() || !i.kstack.is_empty() => Where::Stack(i.ustack.as_slice().into(), i.kstack.as_slice().into()),
            _ => Where::Synthetic(LOST),
        }
    }

    fn fp_where(&self, fp: u64) -> Where {
        match fp {
            event::FP_NEWTHREAD => Where::Synthetic("[thread start]"),
            event::FP_OVER_MAX => Where::Synthetic(OVER_MAX),
            event::FP_STATE_FILTERED => Where::Synthetic(STATE_FILTERED),
            fp => match self.stacks.get(fp) {
                Some((u, k)) if !u.is_empty() || !k.is_empty() => Where::Stack(u.clone(), k.clone()),
                _ => Where::Synthetic(LOST),
            },
        }
    }

    /// The state and place of a block as BPF keyed it.
    pub fn block_of(&self, tid: u32, fp: u64, state: u32, ns: u64, count: u64) -> (State, Where) {
        if state == event::ST_INIT {
            (self.init_state(tid), self.init_where(tid, ns, count))
        } else {
            (st(state), self.fp_where(fp))
        }
    }

    /// A block as BPF keyed it: its thread, stack, state and object, and
    /// its (ns, count).
    pub fn add_key(&self, acc: &mut Acc, tid: u32, fp: u64, state: u32, o: Obj, (ns, count): (u64, u64)) {
        let (s, w) = self.block_of(tid, fp, state, ns, count);
        acc.add_obj(tid, s, w, o, ns, count);
    }

    /// The object of a thread blocked since the start and still in that
    /// block (/proc says what it waits on now).
    fn init_obj(&self, tid: u32) -> Obj {
        match self.sess.initial.get(&tid) {
            Some(i) => Namer::blocked_now(i.pid, event::real_tid(tid)),
            None => Obj::default(),
        }
    }

    /// One entry of the `offcpu` map.
    pub fn add_entry(&self, acc: &mut Acc, k: &[u8], v: &[u8], skip: impl Fn(u32) -> bool) {
        let (Some(k), Some(v)) = (event::from_bytes::<WcOkey>(k), event::from_bytes::<WcOval>(v)) else { return };
        if !skip(k.key()) {
            self.add_key(acc, k.key(), k.fp, k.st(), Obj { oref: k.oref, obj: k.obj }, (v.ns, v.count));
        }
    }

    /// One thread of the thread map: the blocks its entry still holds
    /// (pending, lost), the slice open at the stop closed there (for a
    /// thread that has not exited), into `acc`; its record, named as the
    /// kernel had it (`comm`: the name /proc gives a live thread now).
    pub fn thread(&self, acc: &mut Acc, tid: u32, mut th: WcThread, sums: &mut Sums, comm: impl FnOnce(&WcThread) -> String) -> Thread {
        let (cfg, sess) = (self.cfg, self.sess);
        let end = cfg.end;
        for i in 0..2 {
            if th.pend_cnt[i] > 0 {
                let o = Obj { oref: th.pend_oref[i], obj: th.pend_obj[i] };
                self.add_key(acc, tid, th.pend_fp[i], th.pend_state[i], o, (th.pend_ns[i], th.pend_cnt[i]));
            }
        }
        if th.lost_ns[event::ST_INIT as usize] > 0 {
            acc.add(tid, self.init_state(tid), Where::Synthetic(LOST), th.lost_ns[event::ST_INIT as usize], 1);
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
                    sums.missed_at_stop += 1;
                }
            } else if th.cur_state == event::ST_INIT {
                // Blocked from the start to the stop, its stack from /proc.
                th.off_ns[event::ST_INIT as usize] += d;
                acc.add_obj(tid, self.init_state(tid), self.init_where(tid, d, 1), self.init_obj(tid), d, 1);
            } else {
                let s = th.cur_state.min(3);
                th.off_ns[s as usize] += d;
                if d < cfg.min_block_ns {
                    th.short_ns[s as usize] += d;
                    th.short_cnt[s as usize] += 1;
                }
                let w = match cfg.filtered(st(s), d) {
                    Some(f) => Where::Synthetic(f),
                    None => self.fp_where(th.cur_fp),
                };
                acc.add_obj(tid, st(s), w, Obj { oref: th.cur_oref, obj: th.cur_obj }, d, 1);
            }
        }
        let mut off = StateNs::default();
        for (i, sh) in sums.short.iter_mut().enumerate() {
            *off.get_mut(st(i as u32)) += th.off_ns[i];
            sh.0 += th.short_cnt[i];
            sh.1 += th.short_ns[i];
            if th.lost_ns[i] > 0 {
                acc.add(tid, st(i as u32), Where::Synthetic(LOST), th.lost_ns[i], 1);
            }
        }
        *off.get_mut(self.init_state(tid)) += th.off_ns[event::ST_INIT as usize];
        let mut t = Thread::new(th.pid, event::real_tid(tid), &comm(&th));
        t.start_ns = Some(th.begin_ns);
        t.end_ns = Some(t_end);
        t.on_ns = Some(th.on_ns);
        t.steal_ns = Some(sess.steal_of(tid, &bpf_th, end, th.on_ns));
        t.off_ns = Some(off);
        t
    }
}

/// Counts over threads for the trailer: short blocks (count, ns) per
/// state, and slices whose switch-out was missed, closed at the stop.
#[derive(Default, Clone, Copy)]
pub(crate) struct Sums {
    pub short: [(u64, u64); 4],
    pub missed_at_stop: u64,
}

/// The record of one (thread, state, place) of the summed view.
pub(crate) fn stack_record(pid: u32, tid: u32, comm: &str, state: State, w: &Where) -> Stack {
    let mut s = Stack::new(Kind::Off, pid, event::real_tid(tid), comm);
    s.state = Some(state);
    match w {
        Where::Stack(u, k) => {
            s.ustack = u.to_vec();
            s.kstack = k.to_vec();
        }
        Where::Synthetic(name) => s.frames = vec![Frame::named(*name)],
    }
    s
}

/// What the threads written out during the capture (`early`) add to the
/// records made at the stop: their thread records, and their share of
/// the trailer's counts. Their stack records are in the spool.
#[derive(Default)]
pub struct Done {
    pub threads: Vec<Thread>,
    /// Their tids (a thread blocked since the start that exited is not
    /// one blocked all window).
    pub tids: std::collections::HashSet<u32>,
    pub synthetic: BTreeMap<&'static str, (u64, u64)>,
    pub short: [(u64, u64); 4],
}

/// The records of the capture, its off-CPU stack records last before the
/// trailer.
pub fn records_vec(inp: &Input) -> Vec<Record> {
    let mut stacks = Vec::new();
    let mut recs = records(inp, &mut |s| {
        stacks.push(Record::Stack(s));
        Ok(())
    })
    .unwrap_or_default();
    let trailer = recs.pop();
    recs.append(&mut stacks);
    recs.extend(trailer);
    recs
}

/// The records of the capture but its off-CPU stack records, which go to
/// `sink` one by one (a system-wide capture has 100,000: made into one
/// vector, they were most of the memory at the stop).
pub fn records(inp: &Input, sink: &mut dyn FnMut(Stack) -> std::io::Result<()>) -> std::io::Result<Vec<Record>> {
    let r = Resolve { cfg: inp.cfg, sess: inp.sess, stacks: inp.stacks };
    // Threads the kernel keeps from BPF: what it showed of them is not
    // their time (see wallclock_capture::hidden).
    let mut hidden = inp.sess.hidden(inp.threads, inp.cfg.end);
    // Written out during the capture: seen by BPF (a zombie, in /proc
    // until reaped, is not hidden for having left the thread map).
    hidden.retain(|h| !inp.done.tids.contains(&h.tid));
    let hid: HashSet<u32> = hidden.iter().map(|h| h.tid).collect();
    let mut wakes = Wakes::default();
    for (tid, fp, state, k, ns, count) in Wakes::parse(inp.offwake) {
        if !hid.contains(&tid) {
            let (s, w) = r.block_of(tid, fp, state, ns, count);
            wakes.add((tid, s, w), k, ns, count);
        }
    }
    let mut acc = Acc::default();
    for (k, v) in inp.offcpu {
        r.add_entry(&mut acc, k, v, |tid| hid.contains(&tid));
    }
    let mut sums = Sums::default();
    let mut threads = thread_records(inp, &r, &hid, &mut acc, &mut sums);
    blocked_all_window(inp, &r, &mut acc, &mut threads);
    for h in &hidden {
        acc.add(h.tid, State::Other, Where::Synthetic(wallclock_capture::hidden::FRAME), h.off_ns, 1);
        threads.insert(h.tid, window_thread(h.pid, h.tid, &h.comm, inp.cfg, h.on_ns, State::Other, h.off_ns));
    }
    inp.unwind.runtimes.name_threads(threads.values_mut());
    let stats = trailer(inp, &mut acc, &mut sums, threads.len(), hidden.len(), &wakes);
    let recs = head(inp, &stats, &threads);
    write_stacks(inp, &r, &acc, &wakes, &threads, sink)?;
    Ok(recs.into_iter().chain([Record::Stats(stats)]).collect())
}

/// The thread records of the thread map (but the hidden threads'), their
/// blocks still in it added to `acc`.
fn thread_records(inp: &Input, r: &Resolve, hid: &HashSet<u32>, acc: &mut Acc, sums: &mut Sums) -> BTreeMap<u32, Thread> {
    let mut out = BTreeMap::new();
    for &(tid, th) in inp.threads.iter().filter(|(tid, _)| !hid.contains(tid)) {
        let comm = |th: &WcThread| {
            if th.exit_ns > 0 {
                event::comm_str(&th.comm)
            } else {
                comm_of(inp, th.pid, tid, &event::comm_str(&th.comm))
            }
        };
        let mut t = r.thread(acc, tid, th, sums, comm);
        t.pgen = inp.unwind.pgen(th.pid, th.begin_ns);
        out.insert(tid, t);
    }
    out
}

/// A live thread's name as /proc gives it now, else as its stacks' events
/// had it, else `fallback`.
fn comm_of(inp: &Input, pid: u32, tid: u32, fallback: &str) -> String {
    let tid = event::real_tid(tid);
    procfs::comm(pid, tid).or_else(|| inp.stacks.comm(tid)).unwrap_or_else(|| fallback.to_string())
}

/// Threads blocked from the start to the stop never switched: all the
/// window off-CPU, in the state and stack /proc gave at the start.
fn blocked_all_window(inp: &Input, r: &Resolve, acc: &mut Acc, out: &mut BTreeMap<u32, Thread>) {
    let (start, end) = (inp.cfg.start, inp.cfg.end);
    for (&tid, i) in &inp.sess.initial {
        if out.contains_key(&tid) || inp.done.tids.contains(&tid) || !procfs::exists(i.pid) {
            continue;
        }
        let s = state_from_letter(i.state);
        acc.add_obj(tid, s, r.init_where(tid, end - start, 1), r.init_obj(tid), end - start, 1);
        out.insert(tid, window_thread(i.pid, tid, &comm_of(inp, i.pid, tid, &i.comm), inp.cfg, 0, s, end - start));
    }
}

/// A thread that lived the whole window: `on_ns` on-CPU, `off_ns` in
/// state `s`.
fn window_thread(pid: u32, tid: u32, comm: &str, cfg: &Config, on_ns: u64, s: State, off_ns: u64) -> Thread {
    let mut off = StateNs::default();
    *off.get_mut(s) = off_ns;
    let mut t = Thread::new(pid, tid, comm);
    t.start_ns = Some(cfg.start);
    t.end_ns = Some(cfg.end);
    t.on_ns = Some(on_ns);
    t.steal_ns = Some(0);
    t.off_ns = Some(off);
    t
}

/// The trailer's counts, the threads written out during the capture
/// counted as if made here.
fn trailer(inp: &Input, acc: &mut Acc, sums: &mut Sums, threads: usize, hidden: usize, wakes: &Wakes) -> Stats {
    let done = inp.done;
    for (name, (n, ns)) in &done.synthetic {
        let e = acc.synthetic.entry(name).or_default();
        e.0 += n;
        e.1 += ns;
    }
    for (a, b) in sums.short.iter_mut().zip(done.short) {
        a.0 += b.0;
        a.1 += b.1;
    }
    let mut stats = stats(inp.cfg, inp.counts, acc, &sums.short, threads + done.threads.len());
    *stats.counts.entry("missed_switches".into()).or_default() += sums.missed_at_stop;
    stats.counts.insert("hidden_threads".into(), hidden as u64);
    stats.counts.extend(inp.unwind.reader_stats());
    if inp.cfg.wake_depth.is_some() {
        let blocks: BTreeSet<(u32, State, &Where)> = acc.stacks.keys().map(|(t, s, w, _)| (*t, *s, w)).collect();
        let orphans = wakes.by_block.keys().filter(|(t, s, w)| !blocks.contains(&(*t, *s, w))).count();
        stats.counts.insert("waker_orphan_blocks".into(), orphans as u64);
    }
    stats
}

/// The records before the stacks: the header (with what was lost), the
/// maps, the threads in tid order (a tid used again during the capture:
/// one record per thread), their steal stacks.
fn head(inp: &Input, stats: &Stats, threads: &BTreeMap<u32, Thread>) -> Vec<Record> {
    let mut header = inp.sess.header("offcputime", env!("CARGO_PKG_VERSION"), inp.cfg.end);
    header.min_block_ns = Some(inp.cfg.min_block_ns);
    for k in ["lost_stacks", "lost_stack_ns", "map_full"] {
        let v = stats.counts[k];
        if v > 0 {
            header.lost.insert(k.to_string(), v);
        }
    }
    let mut recs = vec![Record::Header(header)];
    recs.extend(inp.unwind.maps_records().into_iter().map(Record::Maps));
    let mut all: Vec<&Thread> = threads.values().chain(&inp.done.threads).collect();
    all.sort_by_key(|t| t.tid);
    recs.extend(all.iter().map(|t| Record::Thread((*t).clone())));
    recs.extend(all.iter().filter_map(|t| accounting::steal_stack(t)).map(Record::Stack));
    recs
}

/// Each (thread, state, place, object) of `acc` to `sink`: with
/// `--wakers`, one record per waker and one for the time no wake-up
/// ended.
fn write_stacks(inp: &Input, r: &Resolve, acc: &Acc, wakes: &Wakes, threads: &BTreeMap<u32, Thread>, sink: &mut dyn FnMut(Stack) -> std::io::Result<()>) -> std::io::Result<()> {
    let wake_depth = inp.cfg.wake_depth;
    let thread_of = |tid: u32| threads.get(&tid).map(|t| (t.pid, t.comm.clone()));
    let wblock_of = |tid: u32, fp: u64, state: u32| Some(r.block_of(tid, fp, state, 0, 1));
    let wcx = wakers::Ctx { stacks: inp.stacks, wakes, block_of: &wblock_of, thread: &thread_of };
    let comm_by_tid = |t: u32| threads.get(&t).or_else(|| inp.done.threads.iter().find(|x| x.tid == t)).map(|t| t.comm.clone());
    // A stack's time over all its objects: each object's share of its wakers.
    let mut whole_ns: BTreeMap<(u32, State, &Where), u64> = BTreeMap::new();
    if wake_depth.is_some() {
        for ((tid, state, w, _), (ns, _)) in &acc.stacks {
            *whole_ns.entry((*tid, *state, w)).or_default() += ns;
        }
    }
    for ((tid, state, w, o), (ns, count)) in &acc.stacks {
        let (pid, comm) = thread_of(*tid).unwrap_or_default();
        let mut s = stack_record(pid, *tid, &comm, *state, w);
        s.pgen = threads.get(tid).and_then(|t| t.pgen);
        s.object = inp.names.name(pid, *o, &comm_by_tid);
        let (split, left_ns, left_count) = match wake_depth {
            Some(_) => {
                let whole = whole_ns.get(&(*tid, *state, w)).copied().unwrap_or(*ns);
                wakes.split_share(&(*tid, *state, w.clone()), *ns, *count, (*ns, whole))
            }
            None => (Vec::new(), *ns, *count),
        };
        let whole = split.is_empty();
        // Wake-ups BPF told apart (an interrupt's fingerprint holds a
        // little of what it interrupted) may be one waker here.
        let mut by_waker: BTreeMap<wallclock_stream::Waker, (u64, u64)> = BTreeMap::new();
        for (k, wns, wcount) in split {
            let e = by_waker.entry(wakers::waker(&wcx, &k, wake_depth.unwrap_or(1))).or_default();
            e.0 += wns;
            e.1 += wcount;
        }
        for (w, (wns, wcount)) in by_waker {
            let mut ws = s.clone();
            ws.ns = wns;
            ws.count = wcount;
            ws.waker = Some(Box::new(w));
            sink(ws)?;
        }
        if whole || left_ns > 0 || left_count > 0 {
            s.ns = left_ns;
            s.count = left_count;
            sink(s)?;
        }
    }
    Ok(())
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
