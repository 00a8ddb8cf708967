//! Probes and spans against ground truth, as root: tests/programs/spans
//! calls handle(int id) with a known mix (spin ~1 ms, spin 2 ms then sleep
//! 10 ms, wait ~5 ms on a mutex another thread holds, spin 0.2 ms) and
//! prints each call's own wall and CPU time. `wallclock --span 'uspan:handle
//! (arg:0)' --slower-than 8ms` must count its calls, give its latency
//! percentiles, and split the slow calls' time as the program measured it,
//! in the report and in PREFIX.spans.folded; the trace must show the
//! probes and the spans.

mod util;

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;

/// (id, kind, wall ns, cpu ns) per call, from the program's stdout.
fn calls(stdout: &str) -> Vec<(u64, String, u64, u64)> {
    stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 5 && f[0] == "call").then(|| (f[1].parse().unwrap(), f[2].to_string(), f[3].parse().unwrap(), f[4].parse().unwrap()))
        })
        .collect()
}

fn percentile(sorted: &[u64], q: f64) -> u64 {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `1.53 ms`, `816 us`, `12.0 s`, `950 ns` as ns.
fn human(v: &str, unit: &str) -> f64 {
    let v: f64 = v.parse().unwrap_or_else(|_| panic!("bad number {v}"));
    v * match unit {
        "s" => 1e9,
        "ms" => 1e6,
        "us" => 1e3,
        "ns" => 1.0,
        u => panic!("bad unit {u}"),
    }
}

/// The words after `key` in `line`: its value as ns.
fn value_after(line: &str, key: &str) -> f64 {
    let w: Vec<&str> = line.split_whitespace().collect();
    let i = w.iter().position(|x| *x == key).unwrap_or_else(|| panic!("no {key} in {line}"));
    human(w[i + 1], w[i + 2].trim_end_matches(','))
}

#[test]
fn slow_spans_agree_with_the_program() {
    if util::skip_without_root("spans") {
        return;
    }
    let dir = util::scratch("spans");
    let prog = util::build_c("tests/programs/spans/spans.c", &dir, "spans");
    let prefix = dir.join("run");
    let out = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["-F", "499", "--timeline", "--probe", "u:nap (arg:0, stack) | name:\"nap {arg0}\" |", "--span", "uspan:handle (arg:0)", "--slower-than", "8ms", "--prefix"])
        .arg(&prefix)
        .arg("--")
        .arg(&prog)
        .arg("80")
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .output()
        .expect("run scripts/wallclock");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "wallclock failed: {stderr}");
    let truth = calls(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(truth.len(), 80, "the program's own lines: {}", String::from_utf8_lossy(&out.stdout));

    // The report: count and percentiles.
    let report = std::fs::read_to_string(dir.join("run_thread_analysis.txt")).unwrap();
    let sec: Vec<&str> = report.lines().skip_while(|l| !l.starts_with("SPANS uspan:handle")).collect();
    assert!(!sec.is_empty(), "no SPANS section in the report:\n{report}");
    assert_eq!(sec[0], "SPANS uspan:handle: 80 spans", "span count");
    // Each span against the program's own measurement of that call. The
    // probes sit outside the program's two clock reads, so a span is never
    // shorter; it is longer by the probes' cost and the printf after the
    // second read, and by any wait for a CPU in the span: that wait is the
    // span's own runnable time, so the margin is what the machine did to
    // this call, not a constant a preempted call could cross. It can also
    // hold time the hypervisor took from the running vCPU outside the two
    // reads: in a fresh-clone run a mutex call's span (5.12 ms by the
    // program) held 915 us on-CPU against the 43-52 us of the others,
    // 0.89 ms past its call after its last clock read, nothing runnable.
    // A span's steal is not measured, only a thread's: what the spans are
    // longer by past the margin, all together, may be at most the
    // threads' steal in the run.
    let stream = std::fs::read_to_string(dir.join("run.stream")).unwrap();
    let stolen_ns = util::per_thread(&stream, |t| t.steal_ns.unwrap_or(0)).values().sum::<u64>() as f64;
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("run.trace.json")).unwrap()).unwrap();
    let ev = trace["traceEvents"].as_array().unwrap();
    let us = |v: &Value| v.as_f64().unwrap_or(0.0) * 1e3;
    let spans: BTreeMap<i64, (f64, f64)> = ev
        .iter()
        .filter(|e| e["cat"] == "span")
        .map(|e| (e["args"]["arg0"].as_i64().unwrap(), (us(&e["dur"]), us(&e["args"]["runnable_us"]))))
        .collect();
    let mut captured = Vec::new();
    let (mut past, mut longer) = (0.0, Vec::new());
    for (id, kind, wall, _) in &truth {
        let &(dur, runq) = spans.get(&(*id as i64)).unwrap_or_else(|| panic!("no span for call {id}"));
        let wall = *wall as f64;
        assert!(dur + 20e3 >= wall, "call {id} ({kind}): span {dur} ns shorter than the program's {wall} ns");
        let margin = wall + 0.5e6 + runq;
        if dur > margin {
            past += dur - margin;
            longer.push(format!("call {id} ({kind}): span {dur} ns vs the program's {wall} ns (+0.5 ms + its runnable {runq} ns)"));
        }
        captured.push(dur.round() as u64);
    }
    eprintln!("spans past their calls' margin: {} ns in all, the threads' steal {stolen_ns} ns", past.round());
    assert!(past <= stolen_ns, "spans longer than their calls by {} ns past the margin, the threads' steal {stolen_ns} ns:\n{}", past.round(), longer.join("\n"));
    captured.sort_unstable();
    // The report's percentiles are those of the spans it was given (nearest
    // rank), printed to 4 digits.
    let mut walls: Vec<u64> = truth.iter().map(|c| c.2).collect();
    walls.sort_unstable();
    let lat = sec[1];
    for (key, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)] {
        let want = percentile(&captured, q) as f64;
        let got = value_after(lat, key);
        eprintln!("{key}: report {:.3} ms, spans {:.3} ms, program {:.3} ms", got / 1e6, want / 1e6, percentile(&walls, q) as f64 / 1e6);
        assert!((got - want).abs() <= want * 1e-3 + 1e3, "{key}: report {got} ns, its spans' {want} ns ({lat})");
    }

    // The slow calls' split: on-CPU is what the program's CPU clock
    // counted, off-CPU the rest of its wall time. The slow calls are those
    // whose span is over 8 ms, as the tool chose them (each span checked
    // against its call above): a 5 ms call preempted for 3 ms is a slow
    // span. Chosen by the program's own wall time instead, one such call
    // with two CPU hogs beside the test moved the on-CPU share 5 points
    // (15.7% vs 10.7%: its spin counted, not its wall).
    let slow: Vec<_> = truth.iter().filter(|c| spans[&(c.0 as i64)].0 > 8e6).collect();
    // Their time is the spans' (each checked against its call above): a
    // span also holds what the program's clocks cannot see, a wait for a
    // CPU between the entry probe and the program's first clock read (20
    // ms of one spin call with two CPU hogs), all runnable.
    let cpu: u64 = slow.iter().map(|c| c.3).sum();
    let wall = slow.iter().map(|c| spans[&(c.0 as i64)].0).sum::<f64>() as u64;
    let true_on = cpu as f64 * 100.0 / wall as f64;
    // Steal is on-CPU time in a span, not in the program's clocks: the
    // tool's share may be over the program's by at most the threads' steal
    // (a CI run with the host busy took 10-20% of a spinning vCPU).
    // The most the hypervisor (and interrupts) took from the program's
    // threads in the whole run, as the capture measured it.
    let steal = stolen_ns * 100.0 / wall as f64;
    let split = sec[3];
    let pct = |key: &str| -> f64 {
        let i = split.find(key).unwrap_or_else(|| panic!("no {key} in {split}"));
        let rest = &split[i..];
        let open = rest.find('(').unwrap();
        let close = rest.find("%)").unwrap();
        rest[open + 1..close].parse().unwrap()
    };
    let on = pct("on-CPU");
    let off = pct("runnable") + pct("sleeping") + pct("uninterruptible") + pct("other");
    eprintln!("slow calls: {} of 80, on-CPU {on:.1}% (program {true_on:.1}%, threads' steal {steal:.1}%), off-CPU {off:.1}%", slow.len());
    let near = |got: f64, want: f64| got >= want - 3.0 && got <= want + 3.0 + steal;
    assert!(near(on, true_on), "on-CPU {on}% vs the program's {true_on:.1}% (+ steal {steal:.1}%): {split}");
    assert!(near(100.0 - off, true_on), "off-CPU {off}% vs the program's {:.1}% (- steal {steal:.1}%)", 100.0 - true_on);
    // Each slow-kind call asked nanosleep for 10 ms: at least that much of
    // its time sleeps (S ends at the wake-up, after the timer fired).
    let naps = slow.iter().filter(|c| c.1 == "slow").count() as f64;
    let sleeping = value_after(split, "sleeping");
    assert!(sleeping >= naps * 10e6 * 0.99, "sleeping {sleeping} ns for {naps} naps of 10 ms: {split}");
    assert!(sec.iter().any(|l| l.trim_end().ends_with("  nap")), "nap named among the slow spans' functions:\n{}", sec.join("\n"));

    // PREFIX.spans.folded: the same split, under the span's root.
    let folded = std::fs::read_to_string(dir.join("run.spans.folded")).unwrap();
    let mut by_kind: BTreeMap<&str, f64> = BTreeMap::new();
    for l in folded.lines() {
        let (stack, v) = l.rsplit_once(' ').unwrap();
        assert!(stack.starts_with("uspan:handle;"), "root names the span: {l}");
        let kind = if stack.ends_with("_[c]") { "on" } else { "off" };
        *by_kind.entry(kind).or_default() += v.parse::<f64>().unwrap();
    }
    let total = by_kind.values().sum::<f64>();
    let f_on = by_kind.get("on").copied().unwrap_or(0.0) * 100.0 / total;
    eprintln!("spans.folded: {:.1} ms, on-CPU {f_on:.1}%", total / 1e3);
    assert!(near(f_on, true_on), "folded on-CPU {f_on:.1}% vs the program's {true_on:.1}% (+ steal {steal:.1}%)");
    assert!((total * 1e3 - wall as f64).abs() <= 0.03 * wall as f64 + 1e6, "folded total {total} us vs the slow spans' {wall} ns");
    assert!(dir.join("run.spans.svg").is_file());

    // The trace: the spans with their arguments, the probe's instants.
    let mut ids: Vec<i64> = ev.iter().filter(|e| e["cat"] == "span").map(|e| e["args"]["arg0"].as_i64().unwrap()).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..80).collect::<Vec<i64>>(), "one span slice per call, with its id");
    let naps: Vec<i64> = ev.iter().filter(|e| e["cat"] == "probe" && e["ph"] == "i").map(|e| e["args"]["arg0"].as_i64().unwrap()).collect();
    let n = |ns: i64| naps.iter().filter(|&&a| a == ns).count();
    assert_eq!((n(10_000_000), n(5_000_000)), (20, 20), "nap instants: the slow calls' and the lock holder's");
    // `stack`: each instant has its caller, handle for the slow calls'
    // naps, holder for the lock holder's.
    for e in ev.iter().filter(|e| e["cat"] == "probe") {
        let caller = e["args"]["stack"][1].as_str().unwrap_or_else(|| panic!("no stack: {e}"));
        let want = if e["args"]["arg0"] == 10_000_000 { "handle" } else { "holder" };
        assert_eq!(caller, want, "{e}");
        // The name: template, filled with each event's own argument.
        assert_eq!(e["name"].as_str().unwrap(), format!("nap {}", e["args"]["arg0"]), "{e}");
    }
}

#[test]
fn a_probe_that_cannot_attach_fails_before_the_capture() {
    if util::skip_without_root("spans") {
        return;
    }
    let dir = util::scratch("spans-noattach");
    let prog = util::build_c("tests/programs/spans/spans.c", &dir, "spans");
    for (spec, says) in [("u:no_such_fn", "no function no_such_fn"), ("usdt:nope:none", "no USDT probe nope:none")] {
        // The command's own output goes to stderr while the stream is on
        // stdout: none of it may come.
        let out = Command::new(util::bin("offcputime")).args(["--probe", spec, "--"]).arg(&prog).arg("4").output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{spec}: attached?");
        assert_eq!(err.trim().lines().count(), 1, "{spec}: one line (and the program never ran): {err}");
        assert!(err.contains(says) && err.contains(spec), "{spec}: {err}");
    }
}

/// `raw_tp:`: a kernel tracepoint on the target's threads, with its raw
/// arguments: sys_enter's second is the system call's number, and the
/// program's naps are clock_nanosleep (230 on x86_64) calls.
#[cfg(target_arch = "x86_64")]
#[test]
fn raw_tracepoint_events_carry_their_arguments() {
    if util::skip_without_root("spans") {
        return;
    }
    let dir = util::scratch("spans-rawtp");
    let prog = util::build_c("tests/programs/spans/spans.c", &dir, "spans");
    let stream = dir.join("off.json");
    let out = Command::new(util::bin("offcputime"))
        .args(["--probe", "raw_tp:sys_enter (arg:1) | name:\"sys {arg1}\" |", "-o"])
        .arg(&stream)
        .arg("--")
        .arg(&prog)
        .arg("8")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let calls = String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with("call ")).count();
    let text = std::fs::read_to_string(&stream).unwrap();
    let events: Vec<Value> = text.lines().filter(|l| l.starts_with("{\"type\":\"probe\"")).map(|l| serde_json::from_str(l).unwrap()).collect();
    let pid = events.first().map(|e| e["pid"].clone()).expect("no sys_enter event");
    assert!(events.iter().all(|e| e["pid"] == pid), "events of other processes");
    let naps = events.iter().filter(|e| e["args"]["arg1"] == 230).count();
    assert!(events.iter().all(|e| e["probe"] == format!("sys {}", e["args"]["arg1"])), "names from the template");
    // 8 calls: 2 slow ones nap, and the lock holder naps for the 2 mutex ones.
    assert_eq!((calls, naps), (8, 4), "clock_nanosleep entries");
}
