//! `--timeline`: the individual blocks as well as their sums. The BPF side
//! (bpf/timeline.bpf.h) sends one record per block kept as an event into a
//! ring buffer of its own, drained here by a thread; at the stop each
//! record becomes a running slice (from the end of the thread's previous
//! record to the block) and an off-CPU slice (the block, under the stack
//! its time has in the summed view, and what it waited on: the stack's
//! `object`, a `slice_stack` per stack and object), and what is still open
//! is closed at the stop, as the summed view closes it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use libbpf_rs::{MapHandle, RingBufferBuilder};
use wallclock_capture::event::{self, WcThread, WcTlEvent, WcTlThread};
use wallclock_capture::objects::{Namer, Obj};
use wallclock_capture::session::{state_from_letter, Session};
use wallclock_stream::{Frame, Kind, Record, Slice, SliceStack, State, Waker};

use crate::blocks::Where;
use crate::collect::{self, Stacks};
use crate::wakers;

/// The timeline ring buffer's consumer.
pub struct Drain {
    events: Arc<Mutex<Vec<WcTlEvent>>>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Drain {
    pub fn start(map: MapHandle) -> Result<Drain> {
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        let mut b = RingBufferBuilder::new();
        b.add(&map, move |data: &[u8]| {
            if let Some(e) = event::from_bytes::<WcTlEvent>(data) {
                sink.lock().unwrap().push(e);
            }
            0
        })?;
        let rb = b.build().context("opening the timeline ring buffer")?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("timeline".into())
            .spawn(move || {
                // The BPF side submits without waking us (a wake-up per
                // block would double the target's switches): read what
                // is there every 10 ms, 160k records at most between two
                // reads with the default 16 MiB.
                while !stopping.load(Ordering::Relaxed) {
                    let _ = rb.consume();
                    std::thread::sleep(Duration::from_millis(10));
                }
                let _ = rb.consume();
                drop(map);
            })
            .context("starting the timeline thread")?;
        Ok(Drain { events, stop, thread })
    }

    /// Every record sent until the stop (call after the window closed).
    pub fn finish(self) -> Vec<WcTlEvent> {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        std::mem::take(&mut *self.events.lock().unwrap())
    }
}

/// What the capture gives the timeline.
pub struct Input<'a> {
    pub cfg: &'a collect::Config,
    pub sess: &'a Session,
    pub stacks: &'a Stacks,
    pub threads: &'a [(u32, WcThread)],
    pub events: Vec<WcTlEvent>,
    /// The `tl_threads` map: where each thread's next slice starts.
    pub tl_threads: BTreeMap<u32, WcTlThread>,
    /// With `--wakers`: a thread's pid and name, when the capture knows it.
    pub thread: Option<&'a dyn Fn(u32) -> Option<(u32, String)>>,
    /// Names what the blocks waited on, as for the stack records.
    pub names: &'a Namer,
    /// A thread's name by tid (a child that has exited).
    pub comm_of: &'a dyn Fn(u32) -> Option<String>,
}

struct Builder<'a> {
    inp: &'a Input<'a>,
    ids: BTreeMap<(u32, Where, Obj), u64>,
    wakers: BTreeMap<(u32, u32, u64), Waker>,
    /// Built as records directly: a timeline has millions of slices, and
    /// a second vector of them would double the peak memory.
    slices: Vec<Record>,
}

impl Builder<'_> {
    /// The state and place of a block, as collect.rs resolves them for
    /// the summed view (the same stack, the same filters).
    fn resolve(&self, tid: u32, st: u32, fp: u64, ns: u64) -> (State, Where) {
        let cfg = self.inp.cfg;
        if st == event::ST_INIT {
            let s = match self.inp.sess.initial.get(&tid) {
                Some(i) => state_from_letter(i.state),
                None => State::Other,
            };
            if ns > cfg.max_block_ns {
                return (s, Where::Synthetic(collect::OVER_MAX));
            }
            if cfg.state.is_some_and(|w| w != s) {
                return (s, Where::Synthetic(collect::STATE_FILTERED));
            }
            return match self.inp.sess.initial.get(&tid) {
                Some(i) if !i.ustack.is_empty() || !i.kstack.is_empty() => {
                    (s, Where::Stack(i.ustack.as_slice().into(), i.kstack.as_slice().into()))
                }
                _ => (s, Where::Synthetic(collect::LOST)),
            };
        }
        let s = match st {
            event::ST_R => State::R,
            event::ST_S => State::S,
            event::ST_D => State::D,
            _ => State::Other,
        };
        let w = match fp {
            event::FP_NEWTHREAD => Where::Synthetic("[thread start]"),
            event::FP_OVER_MAX => Where::Synthetic(collect::OVER_MAX),
            event::FP_STATE_FILTERED => Where::Synthetic(collect::STATE_FILTERED),
            fp => match self.inp.stacks.get(fp) {
                Some((u, k)) if !u.is_empty() || !k.is_empty() => Where::Stack(u.clone(), k.clone()),
                _ => Where::Synthetic(collect::LOST),
            },
        };
        (s, w)
    }

    /// What a thread blocked since the start and still in that block at
    /// the stop waits on: what /proc says now (as collect.rs's init_obj).
    fn init_obj(&self, tid: u32) -> Obj {
        match self.inp.sess.initial.get(&tid) {
            Some(i) => Namer::blocked_now(i.pid, event::real_tid(tid)),
            None => Obj::default(),
        }
    }

    fn id(&mut self, pid: u32, w: Where, o: Obj) -> u64 {
        let n = self.ids.len() as u64 + 1;
        *self.ids.entry((pid, w, o)).or_insert(n)
    }

    fn on(&mut self, pid: u32, tid: u32, from: u64, to: u64, short: (u64, u64)) {
        if to > from {
            let mut s = Slice::new(Kind::On, pid, tid, from, to);
            (s.short_blocks, s.short_ns) = short;
            self.slices.push(Record::Slice(s));
        }
    }

    /// The waker of a block (the same as `--wakers` resolves, without its
    /// chain), cached by wake-up: a storm has few distinct ones.
    fn waker(&mut self, ctx: u32, wtid: u32, wfp: u64) -> Option<Waker> {
        let thread = self.inp.thread?;
        if wfp == 0 {
            return None;
        }
        let k = (ctx, wtid, wfp);
        if let Some(w) = self.wakers.get(&k) {
            return Some(w.clone());
        }
        let wakes = wakers::Wakes::default();
        let none = |_: u32, _: u64, _: u32| None;
        let cx = wakers::Ctx { stacks: self.inp.stacks, wakes: &wakes, block_of: &none, thread };
        let key = wakers::WakeKey { ctx, wtid, wfp, blk_fp: 0, blk_state: 0 };
        let w = wakers::waker(&cx, &key, 1);
        self.wakers.insert(k, w.clone());
        Some(w)
    }

    /// Whether a slice was added.
    /// `wake`: the (context, tid, fingerprint) of the wake-up that ended
    /// the block (fingerprint 0: none); `o` what it waited on (none for
    /// a synthetic stack, as in the summed view).
    fn off(&mut self, pid: u32, tid: u32, (from, to): (u64, u64), (st, fp, o): (u32, u64, Obj), wake: (u32, u32, u64)) -> bool {
        if to <= from {
            return false;
        }
        let (state, w) = self.resolve(tid, st, fp, to - from);
        let o = if matches!(w, Where::Stack(..)) { o } else { Obj::default() };
        let mut s = Slice::new(Kind::Off, pid, tid, from, to);
        s.state = Some(state);
        s.stack = Some(self.id(pid, w, o));
        s.waker = self.waker(wake.0, wake.1, wake.2);
        self.slices.push(Record::Slice(s));
        true
    }
}

/// The `slice` and `slice_stack` records of the capture, and the
/// timeline's counts for the trailer.
pub fn records(inp: &Input, tl_counts: &[u64]) -> (Vec<Record>, Vec<(String, u64)>) {
    let (start, end) = (inp.cfg.start, inp.cfg.end);
    let n = 2 * inp.events.len() + 2 * inp.threads.len() + inp.sess.initial.len();
    let mut b = Builder { inp, ids: BTreeMap::new(), wakers: BTreeMap::new(), slices: Vec::with_capacity(n) };
    let mut last: BTreeMap<u32, usize> = BTreeMap::new(); // tid -> its last off slice
    for e in &inp.events {
        let mut seg = e.seg_start;
        if e.back_ns > 0 {
            // The block before this record ended back_ns earlier (all of
            // it may go: the runnable end of a wake-up, shorter than the
            // slice's head start; the empty slice is dropped below).
            if let Some(Record::Slice(prev)) = last.get(&e.tid).map(|&i| &mut b.slices[i]) {
                if prev.end_ns == seg && prev.end_ns - prev.start_ns >= e.back_ns {
                    prev.end_ns -= e.back_ns;
                    seg -= e.back_ns;
                }
            }
        }
        b.on(e.pid, e.tid, seg, e.off_start, (e.short_cnt as u64, e.short_ns));
        let o = Obj { oref: e.oref, obj: e.obj };
        if b.off(e.pid, e.tid, (e.off_start, e.off_end), (e.state, e.fp, o), (e.wctx, e.wtid, e.wfp)) {
            last.insert(e.tid, b.slices.len() - 1);
        }
    }
    // What is open at the stop, closed there as collect.rs closes it.
    for &(tid, th) in inp.threads {
        let tl = inp.tl_threads.get(&tid);
        let mut seg = tl.map_or(th.begin_ns, |t| t.seg_start);
        let back = tl.map_or(0, |t| t.back_ns);
        if back > 0 {
            if let Some(Record::Slice(prev)) = last.get(&tid).map(|&i| &mut b.slices[i]) {
                if prev.end_ns == seg && prev.end_ns - prev.start_ns >= back {
                    prev.end_ns -= back;
                    seg -= back;
                }
            }
        }
        let short = tl.map_or((0, 0), |t| (t.short_cnt, t.short_ns));
        if th.exit_ns > 0 {
            b.on(th.pid, tid, seg, th.exit_ns.min(end), short);
        } else if th.running != 0 {
            b.on(th.pid, tid, seg, end, short);
        } else {
            b.on(th.pid, tid, seg, th.last_ts.min(end), short);
            let o = if th.cur_state == event::ST_INIT { b.init_obj(tid) } else { Obj { oref: th.cur_oref, obj: th.cur_obj } };
            b.off(th.pid, tid, (th.last_ts, end), (th.cur_state, th.cur_fp, o), (0, 0, 0));
        }
    }
    // Threads blocked from the start to the stop never switched.
    let seen: std::collections::HashSet<u32> = inp.threads.iter().map(|(t, _)| *t).collect();
    for (&tid, i) in &inp.sess.initial {
        if !seen.contains(&tid) && wallclock_capture::procfs::exists(i.pid) {
            let o = b.init_obj(tid);
            b.off(i.pid, tid, (start, end), (event::ST_INIT, event::FP_INIT, o), (0, 0, 0));
        }
    }
    b.slices.retain(|r| !matches!(r, Record::Slice(s) if s.end_ns == s.start_ns));
    b.slices.sort_by_key(|r| match r {
        Record::Slice(s) => (s.pid, s.tid, s.start_ns),
        _ => (0, 0, 0),
    });
    let mut recs: Vec<Record> = Vec::new();
    let mut ids: Vec<_> = b.ids.into_iter().collect();
    ids.sort_by_key(|(_, id)| *id);
    for ((pid, w, o), id) in ids {
        let object = inp.names.name(pid, o, inp.comm_of);
        let mut s = SliceStack { id, pid, ustack: Vec::new(), kstack: Vec::new(), frames: Vec::new(), object };
        match w {
            Where::Stack(u, k) => (s.ustack, s.kstack) = (u.to_vec(), k.to_vec()),
            Where::Synthetic(name) => s.frames = vec![Frame::named(name)],
        }
        recs.push(Record::SliceStack(s));
    }
    let slices = b.slices.len() as u64;
    recs.append(&mut b.slices);
    let mut counts: Vec<(String, u64)> =
        event::TL_STAT_NAMES.iter().zip(tl_counts).map(|(n, v)| (n.to_string(), *v)).collect();
    counts.push(("timeline_slices".into(), slices));
    (recs, counts)
}
