//! What the tests of tests/wcreport.rs share: the three-thread process
//! they write as a stream, and readers of wcreport's JSON.

use serde_json::Value;
use wallclock_stream::{Frame, GpuInfo, Header, Kind, Record, Stack, State, StateNs, Stats, Thread};

pub const TOOL: &str = "wcreport";
pub const START: u64 = 1_000_000_000;
pub const END: u64 = 3_000_000_000;

pub fn jsonl(recs: &[Record]) -> String {
    recs.iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect()
}

pub fn thread(tid: u32, comm: &str, life: Option<(u64, u64)>, on: u64, off: StateNs) -> Thread {
    let mut t = Thread::new(200, tid, comm);
    if let Some((s, e)) = life {
        t.start_ns = Some(s);
        t.end_ns = Some(e);
    }
    t.on_ns = Some(on);
    t.off_ns = Some(off);
    t
}

pub fn stack(kind: Kind, state: Option<State>, tid: u32, comm: &str, frames: &[&str], ns: u64) -> Record {
    let mut s = Stack::new(kind, 200, tid, comm);
    s.state = state;
    s.frames = frames.iter().map(|f| Frame::named(*f)).collect();
    s.ns = ns;
    s.count = 1;
    Record::Stack(s)
}

pub fn on_stack(tid: u32, comm: &str, frames: &[&str], ns: u64, samples: u64) -> Record {
    let Record::Stack(mut s) = stack(Kind::On, None, tid, comm, frames, ns) else { unreachable!() };
    s.count = samples;
    Record::Stack(s)
}

pub fn off_ns(r: u64, s: u64, d: u64) -> StateNs {
    StateNs { r, s, d, other: 0 }
}

/// A process of three threads: a CPU-bound main, a worker waiting on a
/// mutex, and a short-lived I/O thread whose accounting does not cover
/// its life (coverage 80%). Main launches GPU work.
pub fn threads() -> Vec<Thread> {
    vec![
        thread(200, "app", None, 1_700_000_000, off_ns(100_000_000, 150_000_000, 50_000_000)),
        thread(201, "worker-1", None, 100_000_000, off_ns(0, 1_800_000_000, 100_000_000)),
        thread(202, "io-3", Some((1_500_000_000, 2_500_000_000)), 200_000_000, off_ns(0, 100_000_000, 500_000_000)),
    ]
}

pub fn input(only_tid: Option<u32>) -> String {
    let mut h = Header::new("stackmerge", "test");
    h.pids = vec![200];
    h.start_ns = Some(START);
    h.end_ns = Some(END);
    h.lost.insert("ringbuf_drops".into(), 2);
    let mut recs = vec![Record::Header(h)];
    recs.extend(threads().into_iter().map(Record::Thread));
    let mut gpu = Stack::new(Kind::Gpu, 200, 200, "app");
    gpu.frames = vec![Frame::named("main"), Frame::named("launch")];
    gpu.gpu = Some(GpuInfo {
        activity: "kernel".into(),
        device: Some(0),
        stream: Some(1),
        name: Some("gemm".into()),
        ..Default::default()
    });
    gpu.ns = 400_000_000;
    gpu.count = 4;
    recs.extend([
        // 12 and 5 samples of main's exact 1.7 s on-CPU: 1.2 s and 0.5 s.
        on_stack(200, "app", &["main", "compute"], 1_200_000_000, 12),
        on_stack(200, "app", &["main", "parse"], 500_000_000, 5),
        stack(Kind::Off, Some(State::R), 200, "app", &["main", "compute"], 100_000_000),
        stack(Kind::Off, Some(State::S), 200, "app", &["main", "nanosleep"], 150_000_000),
        stack(Kind::Off, Some(State::D), 200, "app", &["main", "fsync"], 50_000_000),
        Record::Stack(gpu),
        stack(Kind::On, None, 201, "worker-1", &["start", "worker", "hash"], 100_000_000),
        stack(
            Kind::Off,
            Some(State::S),
            201,
            "worker-1",
            &["start", "worker", "pthread_mutex_lock", "__lll_lock_wait", "futex_wait"],
            1_500_000_000,
        ),
        stack(Kind::Off, Some(State::S), 201, "worker-1", &["start", "worker", "nanosleep"], 300_000_000),
        stack(Kind::Off, Some(State::D), 201, "worker-1", &["start", "worker", "fsync"], 100_000_000),
        stack(Kind::On, None, 202, "io-3", &["io_main", "checksum"], 200_000_000),
        stack(Kind::Off, Some(State::D), 202, "io-3", &["io_main", "pwrite64", "ext4_file_write_iter"], 498_000_000),
        stack(Kind::Off, Some(State::S), 202, "io-3", &["[short blocks]"], 100_000_000),
        stack(Kind::Off, Some(State::D), 202, "io-3", &["[lost stack]"], 2_000_000),
        Record::Stats(Stats {
            end_ns: Some(END),
            counts: [("short_blocks".to_string(), 7), ("lost_stacks".to_string(), 1)].into(),
        }),
    ]);
    if let Some(t) = only_tid {
        recs.retain(|r| match r {
            Record::Thread(x) => x.tid == t,
            Record::Stack(x) => x.tid == t,
            _ => true,
        });
    }
    jsonl(&recs)
}

pub fn alive(t: &Thread) -> u64 {
    t.end_ns.unwrap_or(END) - t.start_ns.unwrap_or(START)
}

pub fn json_thread(v: &Value, tid: u32) -> &Value {
    v["threads"].as_array().unwrap().iter().find(|t| t["tid"] == tid).unwrap_or_else(|| panic!("no thread {tid}"))
}
