//! Inputs other than the three-thread stream: bcc's folded output through
//! stackmerge, a bad line, a closed pipe, a sampler's raw stream.

use serde_json::Value;
use wallclock_stream::{Frame, Header, Kind, Record, Stack, State, Thread};

use super::helpers::{input, json_thread, jsonl, stack, END, START, TOOL};
use super::util::{self, ok, run, testdata};

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
    let (first, status, err) = util::first_line_then_close(TOOL, &[], input.into_bytes());
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
