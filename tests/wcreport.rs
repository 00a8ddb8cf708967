//! Tests of wcreport: the figures expected are computed here from the
//! records the test writes, not read back from the tool.

mod util;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use serde_json::Value;
use util::{ok, run, scratch, testdata};
use wallclock_stream::units::human_ns;
use wallclock_stream::{Frame, GpuInfo, Header, Kind, Record, Stack, State, StateNs, Stats, Thread};

const TOOL: &str = "wcreport";
const START: u64 = 1_000_000_000;
const END: u64 = 3_000_000_000;

fn jsonl(recs: &[Record]) -> String {
    recs.iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect()
}

fn thread(tid: u32, comm: &str, life: Option<(u64, u64)>, on: u64, off: StateNs) -> Thread {
    let mut t = Thread::new(200, tid, comm);
    if let Some((s, e)) = life {
        t.start_ns = Some(s);
        t.end_ns = Some(e);
    }
    t.on_ns = Some(on);
    t.off_ns = Some(off);
    t
}

fn stack(kind: Kind, state: Option<State>, tid: u32, comm: &str, frames: &[&str], ns: u64) -> Record {
    let mut s = Stack::new(kind, 200, tid, comm);
    s.state = state;
    s.frames = frames.iter().map(|f| Frame::named(*f)).collect();
    s.ns = ns;
    s.count = 1;
    Record::Stack(s)
}

fn on_stack(tid: u32, comm: &str, frames: &[&str], ns: u64, samples: u64) -> Record {
    let Record::Stack(mut s) = stack(Kind::On, None, tid, comm, frames, ns) else { unreachable!() };
    s.count = samples;
    Record::Stack(s)
}

fn off_ns(r: u64, s: u64, d: u64) -> StateNs {
    StateNs { r, s, d, other: 0 }
}

/// A process of three threads: a CPU-bound main, a worker waiting on a
/// mutex, and a short-lived I/O thread whose accounting does not cover
/// its life (coverage 80%). Main launches GPU work.
fn threads() -> Vec<Thread> {
    vec![
        thread(200, "app", None, 1_700_000_000, off_ns(100_000_000, 150_000_000, 50_000_000)),
        thread(201, "worker-1", None, 100_000_000, off_ns(0, 1_800_000_000, 100_000_000)),
        thread(202, "io-3", Some((1_500_000_000, 2_500_000_000)), 200_000_000, off_ns(0, 100_000_000, 500_000_000)),
    ]
}

fn input(only_tid: Option<u32>) -> String {
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

fn alive(t: &Thread) -> u64 {
    t.end_ns.unwrap_or(END) - t.start_ns.unwrap_or(START)
}

fn json_thread(v: &Value, tid: u32) -> &Value {
    v["threads"].as_array().unwrap().iter().find(|t| t["tid"] == tid).unwrap_or_else(|| panic!("no thread {tid}"))
}

#[test]
fn json_figures_match_the_input() {
    let v: Value = serde_json::from_str(&ok(TOOL, &["--json"], input(None).as_bytes())).unwrap();
    let mut thread_ns = 0;
    let mut on_sum = 0;
    for t in threads() {
        let j = json_thread(&v, t.tid);
        let off = t.off_ns.unwrap();
        assert_eq!(j["alive_ns"], alive(&t), "tid {}", t.tid);
        assert_eq!(j["on_ns"], t.on_ns.unwrap());
        assert_eq!(
            (j["off_ns"]["R"].as_u64(), j["off_ns"]["S"].as_u64(), j["off_ns"]["D"].as_u64()),
            (Some(off.r), Some(off.s), Some(off.d))
        );
        assert_eq!(j["off_total_ns"], off.total());
        let cov = (t.on_ns.unwrap() + off.total()) as f64 * 100.0 / alive(&t) as f64;
        assert!(
            (j["coverage_pct"].as_f64().unwrap() - cov).abs() < 1e-9,
            "tid {} {} vs {cov}",
            t.tid,
            j["coverage_pct"]
        );
        thread_ns += alive(&t);
        on_sum += t.on_ns.unwrap();
    }
    // Accounting that covers the life shows 100%; one that does not shows less.
    assert_eq!(json_thread(&v, 200)["coverage_pct"], 100.0);
    assert_eq!(json_thread(&v, 202)["coverage_pct"], 80.0);
    // GPU time is reported beside, never inside, the thread's wall clock.
    assert_eq!(json_thread(&v, 200)["gpu_ns"], 400_000_000);
    let p = &v["processes"][0];
    assert_eq!((p["pid"].as_u64(), p["comm"].as_str(), p["threads"].as_u64()), (Some(200), Some("app"), Some(3)));
    assert_eq!(p["wall_ns"], END - START);
    assert_eq!(p["thread_ns"], thread_ns);
    assert_eq!(p["on_ns"], on_sum);
    assert_eq!(p["gpu_ns"], 400_000_000);
    // Shown, not hidden: what the header and trailer say was lost, and the synthetic stacks.
    assert_eq!(v["lost"]["ringbuf_drops"], 2);
    assert_eq!(v["stats"]["short_blocks"], 7);
    assert_eq!(v["short_blocks_ns"], 100_000_000);
    assert_eq!(v["lost_stack_ns"], 2_000_000);
    assert_eq!(json_thread(&v, 202)["short_blocks_ns"], 100_000_000);
    // Top stacks: heaviest first, percent of the thread's alive time.
    let top = &json_thread(&v, 200)["top"]["on"];
    assert_eq!(top[0]["stack"], "main;compute");
    assert_eq!(top[0]["ns"], 1_200_000_000);
    assert_eq!(top[0]["pct"], 1_200_000_000f64 * 100.0 / (END - START) as f64);
    let off_top = &json_thread(&v, 201)["top"]["off"];
    assert_eq!(off_top[0]["stack"], "start;worker;pthread_mutex_lock;__lll_lock_wait;futex_wait;[sleep]");
    assert_eq!(off_top[0]["state"], "S");
    assert_eq!(json_thread(&v, 200)["top"]["gpu"][0]["stack"], "main;launch;gemm");
    // --top limits the list.
    let v1: Value = serde_json::from_str(&ok(TOOL, &["--json", "--top", "1"], input(None).as_bytes())).unwrap();
    assert_eq!(json_thread(&v1, 201)["top"]["off"].as_array().unwrap().len(), 1);
}

#[test]
fn roles_and_behaviour_classes() {
    let v: Value = serde_json::from_str(&ok(TOOL, &["--json"], input(None).as_bytes())).unwrap();
    let rc = |tid: u32| {
        (
            json_thread(&v, tid)["role"].as_str().unwrap().to_string(),
            json_thread(&v, tid)["class"].as_str().unwrap().to_string(),
        )
    };
    assert_eq!(rc(200), ("main".into(), "cpu-bound".into()));
    assert_eq!(rc(201), ("worker".into(), "lock-waiting".into()));
    assert_eq!(rc(202), ("io".into(), "io-bound".into()));
}

#[test]
fn text_report_is_aligned_and_honest() {
    let txt = ok(TOOL, &[], input(None).as_bytes());
    // The thread table: right-aligned last column, so every row ends at the same width.
    let table: Vec<&str> = txt.lines().skip_while(|l| !l.trim_start().starts_with("TID")).take(4).collect();
    assert_eq!(table.len(), 4, "{txt}");
    let w = table[0].chars().count();
    assert!(table.iter().all(|l| l.chars().count() == w), "{table:#?}");
    let col = table[0].find("COVERAGE").unwrap();
    assert!(table[1..].iter().all(|l| l[col..].trim().ends_with('%')));
    assert!(table[3].contains("io-3") && table[3].ends_with("80.0%"), "{}", table[3]);
    // Human units of the input's figures, and the lost counts shown.
    for t in threads() {
        assert!(txt.contains(&format!("on-CPU {}", human_ns(t.on_ns.unwrap()))), "{}", t.tid);
    }
    assert!(txt.contains("ringbuf_drops=2") && txt.contains("short_blocks=7"), "{txt}");
    assert!(txt.contains(&format!("[short blocks] {}", human_ns(100_000_000))));
    assert!(txt.contains(&format!("thread-time; on-CPU {}", human_ns(2_000_000_000))));
    // stdin and a file argument give the same report.
    let dir = scratch("wcreport-text");
    let p = dir.join("in.json");
    std::fs::write(&p, input(None)).unwrap();
    assert_eq!(ok(TOOL, &[p.to_str().unwrap()], b""), txt);
    util::golden("wcreport/three-threads.txt", &txt);
    // JSON comes out on one line (for grep and jq); the golden is pretty for review.
    let json = ok(TOOL, &["--json", p.to_str().unwrap()], b"");
    assert_eq!(json.lines().count(), 1);
    assert!(json.contains("\"tid\":202"));
    let v: Value = serde_json::from_str(&json).unwrap();
    util::golden("wcreport/three-threads.json", &(serde_json::to_string_pretty(&v).unwrap() + "\n"));
}

#[test]
fn split_files_hold_each_threads_numbers() {
    let dir = scratch("wcreport-split");
    let tdir = dir.join("threads");
    let prefix = dir.join("run");
    let quiet = ok(
        TOOL,
        &["--split-dir", tdir.to_str().unwrap(), "--prefix", prefix.to_str().unwrap()],
        input(None).as_bytes(),
    );
    let overview = dir.join("run_thread_analysis.txt");
    assert_eq!(quiet, "", "split mode writes files, nothing on stdout");
    let ov = std::fs::read_to_string(&overview).unwrap();
    assert!(!dir.join("run_single_thread_analysis.txt").exists(), "three threads: no single-thread file");
    for t in threads() {
        assert!(ov.contains(&t.comm));
        let role = if t.tid == 200 {
            "main"
        } else if t.tid == 201 {
            "worker"
        } else {
            "io"
        };
        let f = tdir.join(format!("thread_{}_{role}_analysis.txt", t.tid));
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let off = t.off_ns.unwrap();
        let cov = (t.on_ns.unwrap() + off.total()) as f64 * 100.0 / alive(&t) as f64;
        assert!(text.contains(&format!("THREAD {} {}", t.tid, t.comm)), "{text}");
        assert!(text.contains(&format!("alive {}", human_ns(alive(&t)))), "{text}");
        assert!(text.contains(&format!("on-CPU {}", human_ns(t.on_ns.unwrap()))), "{text}");
        assert!(text.contains(&format!("sleeping {}", human_ns(off.s))), "{text}");
        assert!(text.contains(&format!("uninterruptible {}", human_ns(off.d))), "{text}");
        assert!(text.contains(&format!("coverage {cov:.1}%")), "{text}");
        // Only its own row.
        for other in threads().iter().filter(|o| o.tid != t.tid) {
            assert!(!text.contains(&format!("THREAD {}", other.tid)), "{text}");
        }
    }
    // A one-thread target also gets the single-thread file, with its numbers.
    let dir1 = scratch("wcreport-split1");
    let prefix1 = dir1.join("one");
    ok(
        TOOL,
        &["--split-dir", dir1.to_str().unwrap(), "--prefix", prefix1.to_str().unwrap()],
        input(Some(201)).as_bytes(),
    );
    let single = std::fs::read_to_string(dir1.join("one_single_thread_analysis.txt")).unwrap();
    assert!(single.contains("THREAD 201 worker-1") && single.contains("lock-waiting"), "{single}");
    assert!(single.contains(&format!("on-CPU {}", human_ns(100_000_000))));
    assert!(dir1.join("thread_201_worker_analysis.txt").exists());
    assert!(dir1.join("one_thread_analysis.txt").exists());
}

#[test]
fn bcc_inputs_through_stackmerge() {
    let (Some(offp), Some(onp)) = (testdata("bcc/offcputime-f-mixed.folded"), testdata("bcc/profile-f-mixed.folded"))
    else {
        return;
    };
    // Values summed per distinct stack (a stack's samples scale once).
    let vals = |p: &std::path::Path| -> Vec<u64> {
        let mut per: std::collections::BTreeMap<String, u64> = Default::default();
        for l in std::fs::read_to_string(p).unwrap().lines().filter(|l| !l.trim().is_empty()) {
            let (stack, v) = l.rsplit_once(' ').unwrap();
            *per.entry(stack.to_string()).or_insert(0) += v.trim().parse::<u64>().unwrap();
        }
        per.into_values().collect()
    };
    let want_off: u64 = vals(&offp).iter().map(|v| v * 1_000).sum();
    let want_on: u64 = vals(&onp).iter().map(|n| ((*n as u128 * 1_000_000_000 + 24) / 49) as u64).sum();
    let merged = ok("stackmerge", &[offp.to_str().unwrap(), "--on", onp.to_str().unwrap()], b"");
    let v: Value = serde_json::from_str(&ok(TOOL, &["--json"], merged.as_bytes())).unwrap();
    let p = &v["processes"][0];
    assert_eq!(p["on_ns"], want_on);
    assert_eq!(p["off_total_ns"], want_off);
    // No state in bcc's output: the time is shown as "other", not guessed.
    assert_eq!(p["off_ns"]["other"], want_off);
    // No window and no thread lives in folded input: coverage unknown, not invented.
    assert!(json_thread(&v, 0)["coverage_pct"].is_null());
    // And plain folded lines are read directly too.
    let direct: Value = serde_json::from_str(&ok(TOOL, &["--json", offp.to_str().unwrap()], b"")).unwrap();
    assert_eq!(direct["threads"][0]["other_ns"], want_off);
}

#[test]
fn bad_line_named_report_of_what_came_before() {
    let text = format!("{}{{\"type\":\"stack\",\"kind\":\"sideways\"}}\n", input(Some(201)));
    let bad_line = text.lines().count();
    let out = run(TOOL, &["--json"], text.as_bytes());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("wcreport: error:") && err.contains(&format!("line {bad_line}")), "{err}");
    assert_eq!(err.lines().count(), 1);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json_thread(&v, 201)["on_ns"], 100_000_000);
    // Empty input: a report of nothing, exit 0.
    let empty = ok(TOOL, &[], b"");
    assert!(empty.contains("0 thread(s)"), "{empty}");
    let help = ok(TOOL, &["--help"], b"");
    assert!(help.contains("EXAMPLES:") && help.contains("--split-dir"));
}

#[test]
fn head_closes_the_pipe_quietly() {
    let mut recs = Vec::new();
    for tid in 1..4000u32 {
        recs.push(stack(Kind::Off, Some(State::S), tid, "w", &["main", "poll"], tid as u64 * 1000));
    }
    let input = jsonl(&recs);
    let mut child = Command::new(util::bin(TOOL))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let _ = sin.write_all(input.as_bytes());
    });
    let mut first = String::new();
    {
        let mut r = BufReader::new(child.stdout.take().unwrap());
        r.read_line(&mut first).unwrap();
    }
    let status = child.wait().unwrap();
    writer.join().unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(first.starts_with("wall-clock report"), "{first}");
    assert!(status.success() && err.is_empty(), "{status}: {err}");
}

/// A capture stream read directly: sampled stacks carry a sampler's
/// estimate; the report divides the thread's exact on-CPU time by samples.
#[test]
fn raw_samples_divide_exact_on_cpu_time() {
    let mut h = Header::new("oncputime", "test");
    h.start_ns = Some(START);
    h.end_ns = Some(END);
    let mut t = Thread::new(300, 300, "calc");
    t.on_ns = Some(1_000_000_007);
    let recs = jsonl(&[
        Record::Header(h),
        Record::Thread(t),
        on_stack_of(300, &["main", "a"], 3),
        on_stack_of(300, &["main", "b"], 4),
    ]);
    let v: Value = serde_json::from_str(&ok(TOOL, &["--json"], recs.as_bytes())).unwrap();
    let th = &v["threads"][0];
    let top = th["top"]["on"].as_array().unwrap();
    let want = |n: u128| ((1_000_000_007u128 * n + 3) / 7) as u64;
    assert_eq!((top[0]["stack"].as_str(), top[0]["ns"].as_u64()), (Some("main;b"), Some(want(4))));
    assert_eq!((top[1]["stack"].as_str(), top[1]["ns"].as_u64()), (Some("main;a"), Some(want(3))));
    assert_eq!(th["on_ns"], 1_000_000_007);
}

fn on_stack_of(pid: u32, frames: &[&str], samples: u64) -> Record {
    let mut s = Stack::new(Kind::On, pid, pid, "calc");
    s.frames = frames.iter().map(|f| Frame::named(*f)).collect();
    s.count = samples;
    s.ns = samples * 20_408_163; // what a 49 Hz sampler would estimate
    Record::Stack(s)
}
