//! Tests of wcreport: the figures expected are computed here from the
//! records the test writes, not read back from the tool.
//!
//! Here: the three-thread process's figures, roles, text and split files.
//! tests/wcreport/: other inputs (inputs.rs), the GPU section (gpu.rs),
//! the fake CUDA program end to end (fake_cuda.rs).

mod util;

#[path = "wcreport/fake_cuda.rs"]
mod fake_cuda;
#[path = "wcreport/gpu.rs"]
mod gpu;
#[path = "wcreport/helpers.rs"]
mod helpers;
#[path = "wcreport/inputs.rs"]
mod inputs;

use helpers::{alive, input, json_thread, threads, END, START, TOOL};
use serde_json::Value;
use util::{ok, scratch};
use wallclock_stream::units::human_ns;

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
