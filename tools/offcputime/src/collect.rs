//! From the BPF maps and stack events to stream records.

use std::collections::{BTreeMap, HashMap};

use wallclock_capture::event::{self, WcEvent, WcOkey, WcOval, WcThread};
use wallclock_capture::session::{state_from_letter, Session};
use wallclock_capture::{procfs, unwind::Unwind};
use wallclock_stream::{accounting, Frame, Kind, Record, StateNs, Stack, State, Stats, Thread};

use crate::Cli;

/// Stacks sent by BPF, unwound while their process lived.
#[derive(Default)]
pub struct Stacks {
    by_fp: HashMap<u64, (Vec<u64>, Vec<u64>)>,
    comm: HashMap<u32, String>,
}

impl Stacks {
    pub fn event(&mut self, data: &[u8], unwind: &mut Unwind) {
        let Some(e) = event::from_bytes::<WcEvent>(data) else { return };
        self.comm.insert(e.tid, event::comm_str(&e.comm));
        if self.by_fp.contains_key(&e.fp) {
            return;
        }
        let ustack = unwind.unwind(e.pid, e.ip, e.sp, e.bp, e.ustack_bytes());
        self.by_fp.insert(e.fp, (ustack, e.kstack_root_first()));
    }
}

pub struct Config<'a> {
    pub start: u64,
    pub end: u64,
    pub min_block_ns: u64,
    pub cli: &'a Cli,
}

fn st(s: u32) -> State {
    match s {
        event::ST_R => State::R,
        event::ST_S => State::S,
        event::ST_D => State::D,
        _ => State::Other,
    }
}

#[derive(PartialEq, Eq, PartialOrd, Ord, Clone)]
enum Where {
    Stack(Vec<u64>, Vec<u64>),
    Synthetic(&'static str),
}

struct Acc {
    /// (tid, state, where) -> (ns, count)
    stacks: BTreeMap<(u32, State, Where), (u64, u64)>,
    lost_blocks: u64,
    short_blocks: u64,
}

impl Acc {
    fn add(&mut self, tid: u32, s: State, w: Where, ns: u64, count: u64) {
        if w == Where::Synthetic("[lost stack]") {
            self.lost_blocks += count;
        }
        let e = self.stacks.entry((tid, s, w)).or_default();
        e.0 += ns;
        e.1 += count;
    }
}

pub fn records(
    cfg: &Config,
    sess: &Session,
    unwind: &Unwind,
    stacks: &Stacks,
    threads: &[(Vec<u8>, Vec<u8>)],
    offcpu: &[(Vec<u8>, Vec<u8>)],
    counts: &[u64],
) -> Vec<Record> {
    let (start, end) = (cfg.start, cfg.end);
    let mut acc = Acc { stacks: BTreeMap::new(), lost_blocks: 0, short_blocks: 0 };
    // The launched command waits (sleeping) for its release before exec.
    let launched = sess.launched.as_ref().map(|l| l.pid());
    let init_state = |tid: u32| match sess.initial.get(&tid) {
        Some(i) => state_from_letter(i.state),
        None if launched == Some(tid) => State::S,
        None => State::Other,
    };
    let init_where = |tid: u32| match sess.initial.get(&tid) {
        _ if launched == Some(tid) => Where::Synthetic("[before exec]"),
        Some(i) if !i.ustack.is_empty() || !i.kstack.is_empty() => Where::Stack(i.ustack.clone(), i.kstack.clone()),
        _ => Where::Synthetic("[lost stack]"),
    };
    let fp_where = |fp: u64| match fp {
        event::FP_NEWTHREAD => Where::Synthetic("[thread start]"),
        fp => match stacks.by_fp.get(&fp) {
            Some((u, k)) if !u.is_empty() || !k.is_empty() => Where::Stack(u.clone(), k.clone()),
            _ => Where::Synthetic("[lost stack]"),
        },
    };

    let add_key = |acc: &mut Acc, tid: u32, fp: u64, state: u32, ns: u64, count: u64| {
        if state == event::ST_INIT {
            acc.add(tid, init_state(tid), init_where(tid), ns, count);
        } else {
            acc.add(tid, st(state), fp_where(fp), ns, count);
        }
    };
    for (k, v) in offcpu {
        let (Some(k), Some(v)) = (event::from_bytes::<WcOkey>(k), event::from_bytes::<WcOval>(v)) else { continue };
        add_key(&mut acc, k.tid, k.fp, k.state, v.ns, v.count);
    }

    let mut out_threads = BTreeMap::new();
    let comm_of = |pid: u32, tid: u32, fallback: &str| {
        procfs::comm(pid, tid).or_else(|| stacks.comm.get(&tid).cloned()).unwrap_or_else(|| fallback.to_string())
    };
    for (k, v) in threads {
        let (Some(tid), Some(mut th)) =
            (k.get(..4).map(|b| u32::from_ne_bytes(b.try_into().unwrap())), event::from_bytes::<WcThread>(v))
        else {
            continue;
        };
        if th.pend_cnt > 0 {
            add_key(&mut acc, tid, th.pend_fp, th.pend_state, th.pend_ns, th.pend_cnt);
        }
        if th.lost_ns[event::ST_INIT as usize] > 0 {
            acc.add(tid, init_state(tid), Where::Synthetic("[lost stack]"), th.lost_ns[event::ST_INIT as usize], 1);
        }
        let t_end = if th.exit_ns > 0 { th.exit_ns.min(end) } else { end };
        let bpf_th = th; // as the BPF side left it, before the open slice is closed below
        if th.exit_ns == 0 && th.last_ts < end {
            // Close what is still open at the stop.
            let d = end - th.last_ts;
            if th.running != 0 {
                th.on_ns += d;
            } else {
                let s = th.cur_state.min(3);
                th.off_ns[s as usize] += d;
                if d < cfg.min_block_ns {
                    th.short_ns[s as usize] += d;
                    th.short_cnt[s as usize] += 1;
                } else {
                    acc.add(tid, st(s), fp_where(th.cur_fp), d, 1);
                }
            }
        }
        let mut off = StateNs::default();
        for i in 0..4 {
            *off.get_mut(st(i as u32)) += th.off_ns[i];
            if th.short_ns[i] > 0 {
                acc.short_blocks += th.short_cnt[i];
                acc.add(tid, st(i as u32), Where::Synthetic("[short blocks]"), th.short_ns[i], th.short_cnt[i]);
            }
            if th.lost_ns[i] > 0 {
                acc.add(tid, st(i as u32), Where::Synthetic("[lost stack]"), th.lost_ns[i], 1);
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
        acc.add(tid, s, init_where(tid), end - start, 1);
        let mut t = Thread::new(i.pid, tid, &comm_of(i.pid, tid, &i.comm));
        t.start_ns = Some(start);
        t.end_ns = Some(end);
        t.on_ns = Some(0);
        t.steal_ns = Some(0);
        t.off_ns = Some(off);
        out_threads.insert(tid, t);
    }

    let mut stats = Stats { end_ns: Some(end), counts: BTreeMap::new() };
    for (name, v) in event::STAT_NAMES.iter().zip(counts) {
        if *name != "samples" {
            stats.counts.insert(name.to_string(), *v);
        }
    }
    stats.counts.insert("short_blocks".into(), acc.short_blocks);
    stats.counts.insert("lost_stacks".into(), acc.lost_blocks);
    stats.counts.insert("threads".into(), out_threads.len() as u64);

    let mut header = sess.header("offcputime", env!("CARGO_PKG_VERSION"), end);
    header.min_block_ns = Some(cfg.min_block_ns);
    for k in ["lost_stacks", "ringbuf_drops", "map_full"] {
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
    for ((tid, state, w), (ns, count)) in acc.stacks {
        let (pid, comm) = out_threads.get(&tid).map_or((0, String::new()), |t| (t.pid, t.comm.clone()));
        let mut s = Stack::new(Kind::Off, pid, tid, &comm);
        s.state = Some(state);
        s.ns = ns;
        s.count = count;
        match w {
            Where::Stack(u, k) => {
                s.ustack = u;
                s.kstack = k;
            }
            Where::Synthetic(name) => s.frames = vec![Frame::named(name)],
        }
        recs.push(Record::Stack(s));
    }
    recs.push(Record::Stats(stats));
    let _ = cfg.cli;
    recs
}
