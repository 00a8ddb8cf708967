//! Wakers (`offcputime --wakers`, `stackmerge --wakers`): against a
//! workload whose threads wait on each other in functions of their own
//! (tests/programs/wakers/wakers.c), the time each waiter spent blocked
//! must carry the thread and function that ended its waits, a sleep must
//! be the timer's, and a chain must reach the disk. The capture tests load
//! real BPF programs: run as root (they skip, saying so, otherwise).

mod util;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

fn skip() -> bool {
    util::skip_without_root("capture")
}

fn workload() -> PathBuf {
    static W: OnceLock<PathBuf> = OnceLock::new();
    W.get_or_init(|| util::build_c("tests/programs/wakers/wakers.c", &util::root().join("target/test-tmp/wakers-bin"), "wakers"))
        .clone()
}

/// name -> tid, and per thread function -> (wall, cpu) ns.
struct Truth {
    tid: HashMap<String, u64>,
    funcs: HashMap<String, HashMap<String, (u64, u64)>>,
}

fn truth(stdout: &[u8]) -> Truth {
    let mut t = Truth { tid: HashMap::new(), funcs: HashMap::new() };
    for l in String::from_utf8_lossy(stdout).lines() {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("bad truth line {l}: {e}"));
        let name = v["name"].as_str().unwrap().to_string();
        t.tid.insert(name.clone(), v["tid"].as_u64().unwrap());
        let f = v["funcs"].as_object().unwrap().iter().map(|(k, x)| (k.clone(), (x["wall"].as_u64().unwrap(), x["cpu"].as_u64().unwrap())));
        t.funcs.insert(name, f.collect());
    }
    t
}

/// Capture the workload with `args`, symbolize; the records and the truth.
fn capture(name: &str, args: &[&str], env: &[(&str, &str)], secs: &str) -> (Vec<Value>, Truth, PathBuf) {
    let dir = util::scratch(name);
    let raw = dir.join("raw.stream");
    let mut cmd = Command::new(util::bin("offcputime"));
    cmd.args(args).arg("-o").arg(&raw).arg("--").arg(workload()).arg(secs).arg(&dir);
    cmd.envs(env.iter().copied()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "offcputime: {}", String::from_utf8_lossy(&out.stderr));
    let t = truth(&out.stdout);
    let sym = dir.join("sym.stream");
    let st = Command::new(util::bin("stacksym")).arg(&raw).arg("-o").arg(&sym).status().unwrap();
    assert!(st.success());
    // The stack table (stream 1.3) resolved: every stack with its frames.
    let text = util::resolved(&std::fs::read_to_string(&sym).unwrap());
    let recs = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (recs, t, sym)
}

fn funcs(v: &Value) -> Vec<&str> {
    v.as_array().map_or(Vec::new(), |a| a.iter().filter_map(|f| f["func"].as_str()).collect())
}

fn has(v: &Value, f: &str) -> bool {
    funcs(v).contains(&f)
}

/// Blocked (S or D) off-CPU stacks of `tid` under function `f`.
fn blocked_in<'a>(recs: &'a [Value], tid: u64, f: &str) -> Vec<&'a Value> {
    recs.iter()
        .filter(|r| r["type"] == "stack" && r["kind"] == "off" && r["tid"] == tid)
        .filter(|r| r["state"] == "S" || r["state"] == "D")
        .filter(|r| has(&r["frames"], f))
        .collect()
}

fn ns(v: &&Value) -> u64 {
    v["ns"].as_u64().unwrap_or(0)
}

#[test]
fn each_wait_carries_its_waker() {
    if skip() {
        return;
    }
    let (recs, t, _) = capture("wakers-truth", &["--wakers", "--wake-depth", "2"], &[], "3");
    let pairs = [
        ("consumer", "consume_wait", "producer", "produce_signal"),
        ("locker", "wait_lock", "holder", "release_lock"),
        ("reader", "pipe_read_wait", "writer", "pipe_write"),
        ("requester", "wait_for_worker", "worker", "worker_signal"),
    ];
    for (waiter, wf, waker, gf) in pairs {
        let tid = t.tid[waiter];
        let (wall, cpu) = t.funcs[waiter][wf];
        let blocked = blocked_in(&recs, tid, wf);
        let total: u64 = blocked.iter().map(ns).sum();
        let right: u64 = blocked
            .iter()
            .filter(|r| {
                let w = &r["waker"];
                w["context"] == "thread" && w["tid"] == t.tid[waker] && has(&w["frames"], gf)
            })
            .map(ns)
            .sum();
        let share = right as f64 / total.max(1) as f64;
        eprintln!("{waiter}/{wf}: blocked {total} ns of {} off-CPU by its own clocks; {:.1}% woken by {waker}/{gf}", wall - cpu, share * 100.0);
        // The blocks are there: most of the function's time off its CPU
        // (the rest is runnable, waiting for a CPU on a loaded machine).
        assert!(total as f64 >= 0.5 * (wall - cpu) as f64, "{waiter}: {total} ns blocked in {wf}, truth {} off-CPU", wall - cpu);
        assert!(total <= wall + wall / 20, "{waiter}: {total} ns blocked in {wf}, more than its wall time {wall}");
        assert!(share >= 0.95, "{waiter}: only {:.1}% of its waits in {wf} name {waker} in {gf}", share * 100.0);
    }

    // The sleep ends by the timer, whatever thread the interrupt stopped.
    let tid = t.tid["sleeper"];
    let blocked = blocked_in(&recs, tid, "timer_sleep");
    let total: u64 = blocked.iter().map(ns).sum();
    let timer: u64 = blocked.iter().filter(|r| r["waker"]["context"] == "timer").map(ns).sum();
    let (wall, cpu) = t.funcs["sleeper"]["timer_sleep"];
    assert!(total as f64 >= 0.5 * (wall - cpu) as f64, "sleeper: {total} ns blocked, truth {}", wall - cpu);
    assert!(timer as f64 >= 0.95 * total as f64, "sleeper: {timer} of {total} ns woken by [timer]");
    for r in &blocked {
        assert!(r["waker"]["context"] != "thread", "a bystander thread took the timer's wake-up: {}", r["waker"]);
    }

    // Depth 2: the requester waited on the worker, which waited on the disk.
    let blocked = blocked_in(&recs, t.tid["requester"], "wait_for_worker");
    let total: u64 = blocked.iter().map(ns).sum();
    let disk: u64 = blocked
        .iter()
        .filter(|r| {
            let b = &r["waker"]["blocked"];
            b["state"] == "D" && has(&b["frames"], "worker_sync")
        })
        .map(ns)
        .sum();
    eprintln!("requester: {:.1}% of its wait has the worker's fdatasync beneath it", disk as f64 * 100.0 / total.max(1) as f64);
    assert!(disk as f64 >= 0.5 * total as f64, "requester: {disk} of {total} ns show the worker's disk wait");

    // Splitting by waker keeps every thread's time: its off-CPU stacks add
    // up to its off-CPU total.
    let mut off: HashMap<u64, u64> = HashMap::new();
    for r in recs.iter().filter(|r| r["type"] == "stack" && r["kind"] == "off") {
        *off.entry(r["tid"].as_u64().unwrap()).or_default() += r["ns"].as_u64().unwrap();
    }
    for th in recs.iter().filter(|r| r["type"] == "thread") {
        let want: u64 = th["off_ns"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        let got = off.get(&th["tid"].as_u64().unwrap()).copied().unwrap_or(0);
        assert!(got.abs_diff(want) <= want / 100 + 1000, "thread {}: stacks {got} ns, off_ns {want}", th["tid"]);
    }
}

#[test]
fn stackmerge_folds_blocked_then_waker() {
    if skip() {
        return;
    }
    let (_, t, sym) = capture("wakers-folded", &["--wakers", "--wake-depth", "2"], &[], "2");
    let folded = util::ok("stackmerge", &["--wakers", "--folded", sym.to_str().unwrap()], b"");
    let worker = format!("worker ({})_[w]", t.tid["worker"]);
    let line = folded
        .lines()
        .filter(|l| l.contains(";wait_for_worker;") && l.contains(&worker))
        .max_by_key(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .unwrap_or_else(|| panic!("no folded line of the requester woken by {worker}:\n{folded:.3000}"));
    // blocked root..leaf, then the waker leaf..root and its name, then its block.
    let (blocked, rest) = line.split_once(";--;").unwrap();
    // The state, then what it waited on: the worker's condition variable.
    assert!(blocked.contains(";[sleep];[lock wcv") && blocked.ends_with("]_[o]"), "{line}");
    let (waker, chain) = rest.split_once(";--;").unwrap_or((rest, ""));
    let wf: Vec<&str> = waker.split(';').collect();
    assert!(wf.iter().all(|f| f.ends_with("_[w]")), "{line}");
    let sig = wf.iter().position(|f| *f == "worker_signal_[w]").expect("worker_signal");
    let thr = wf.iter().position(|f| *f == "worker_[w]").expect("worker");
    assert!(sig < thr && wf.last() == Some(&worker.as_str()), "waker frames go leaf to root: {line}");
    assert!(chain.contains("worker_sync_[w]") && chain.contains("[io]_[w]"), "the chain shows the disk wait: {line}");
    // flame: waker frames purple, the block's blue, and a legend.
    let svg = util::ok("flame", &[], folded.as_bytes());
    let fill = |name: &str| -> (u8, u8, u8) {
        let at = svg.find(&format!("<title>{name} (")).unwrap_or_else(|| panic!("no box {name}"));
        let f = &svg[at..][svg[at..].find("fill=\"rgb(").unwrap() + 10..];
        let v: Vec<u8> = f[..f.find(')').unwrap()].split(',').map(|x| x.parse().unwrap()).collect();
        (v[0], v[1], v[2])
    };
    let (r, g, b) = fill("worker_signal");
    assert!((140..=190).contains(&r) && (70..=120).contains(&g) && b >= 190, "waker box rgb({r},{g},{b})");
    let (r, g, b) = fill("wait_for_worker");
    assert!(r <= 140 && g <= 140 && b >= 190, "blocked box rgb({r},{g},{b})");
    assert!(svg.contains("who woke the block: purple"), "no legend");
    // wcreport: each waiter's stack with its waker, and the waits-on table.
    let report = util::ok("wcreport", &[sym.to_str().unwrap()], b"");
    let woken = format!("woken by worker ({}) in worker_signal:", t.tid["worker"]);
    assert!(report.contains(&woken), "no '{woken}' in the report:\n{report}");
    assert!(report.contains(&format!("woken by producer ({}) in produce_signal:", t.tid["producer"])), "{report}");
    let table = &report[report.find("WAITS ON").expect("a WAITS ON table")..];
    let row = table.lines().find(|l| l.contains(&format!("requester ({})", t.tid["requester"]))).expect("requester row");
    assert!(row.contains(&format!("worker ({})", t.tid["worker"])), "{row}");
    assert!(table.lines().any(|l| l.contains("sleeper (") && l.contains("[timer]")), "{table}");
    // Without --wakers: as before, no waker anywhere.
    let plain = util::ok("stackmerge", &["--folded", sym.to_str().unwrap()], b"");
    assert!(!plain.contains(";--;") && !plain.contains("_[w]"));
}

#[test]
fn raw_tp_fallback_names_wakers_too() {
    if skip() {
        return;
    }
    let (recs, t, _) = capture("wakers-rawtp", &["--wakers"], &[("WALLCLOCK_FORCE_RAW_TP", "1")], "1");
    let blocked = blocked_in(&recs, t.tid["reader"], "pipe_read_wait");
    let total: u64 = blocked.iter().map(ns).sum();
    let right: u64 = blocked.iter().filter(|r| r["waker"]["tid"] == t.tid["writer"] && has(&r["waker"]["frames"], "pipe_write")).map(ns).sum();
    assert!(total > 0 && right as f64 >= 0.95 * total as f64, "raw_tp: {right} of {total} ns");
    let sleeps = blocked_in(&recs, t.tid["sleeper"], "timer_sleep");
    assert!(sleeps.iter().all(|r| r["waker"]["context"] == "timer" || r.get("waker").is_none_or(Value::is_null)));
}

fn run_with_stderr(tool: &str, args: &[&str], input: &str) -> (String, String) {
    let out = util::run(tool, args, input.as_bytes());
    assert!(out.status.success(), "{tool}: {}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

#[test]
fn newer_waker_fields_read_with_a_warning() {
    let input = [
        r#"{"type":"header","format":"wallclock","version":"1.9","tool":"offcputime","tool_version":"9","clock":"monotonic","pids":[7]}"#,
        r#"{"type":"stack","kind":"off","state":"S","pid":7,"tid":8,"comm":"app","frames":[{"func":"main"},{"func":"wait"}],"ns":5000,"count":1,"waker":{"context":"thread","pid":7,"tid":9,"comm":"w","frames":[{"func":"main"},{"func":"wake"}],"hops_seen":3,"new_thing":{"x":1}}}"#,
        r#"{"type":"stack","kind":"off","state":"S","pid":7,"tid":8,"comm":"app","frames":[{"func":"main"},{"func":"wait"}],"ns":3000,"count":1}"#,
    ]
    .join("\n");
    let (out, err) = run_with_stderr("stackmerge", &["--wakers", "--folded", "--unit", "ns"], &input);
    assert!(err.contains("version 1.9 is newer"), "{err}");
    assert_eq!(out, "app (7);main;wait;[sleep]_[o] 3000\napp (7);main;wait;[sleep]_[o];--;wake_[w];main_[w];w (9)_[w] 5000\n");
    // Without --wakers the block's whole time, as an older tool would see it.
    let (out, _) = run_with_stderr("stackmerge", &["--folded", "--unit", "ns"], &input);
    assert_eq!(out, "app (7);main;wait;[sleep]_[o] 8000\n");
}

#[test]
fn waker_without_a_block_is_dropped_with_a_warning() {
    let input = [
        r#"{"type":"stack","kind":"on","pid":7,"tid":8,"comm":"app","frames":[{"func":"main"},{"func":"spin"}],"ns":4000,"count":2,"waker":{"context":"timer"}}"#,
        r#"{"type":"stack","kind":"off","state":"S","pid":7,"tid":8,"comm":"app","frames":[{"func":"main"},{"func":"wait"}],"ns":1000,"count":1,"waker":{"context":"timer"}}"#,
    ]
    .join("\n");
    let (out, err) = run_with_stderr("stackmerge", &["--wakers", "--folded", "--unit", "ns"], &input);
    assert!(err.contains("line 1: a waker on a stack record of kind on"), "{err}");
    assert_eq!(out, "app (7);main;spin_[c] 4000\napp (7);main;wait;[sleep]_[o];--;[timer]_[w] 1000\n");
    // The stream keeps the stack, without the waker it cannot have.
    let (out, _) = run_with_stderr("stackmerge", &["--wakers"], &input);
    let on: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).filter(|r: &Value| r["kind"] == "on").collect();
    assert_eq!(on.len(), 1);
    assert!(on[0].get("waker").is_none());
}

/// `offcputime --timeline --wakers`: each sleeping slice carries the
/// wake-up that ended it, and `wcexport --trace` shows it (args and a flow
/// arrow from the waker's track to the woken thread's).
#[test]
fn timeline_slices_carry_their_wakers() {
    if skip() {
        return;
    }
    let (recs, t, sym) = capture("wakers-timeline", &["--timeline", "--wakers"], &[], "3");
    let slices: Vec<&Value> = recs.iter().filter(|r| r["type"] == "slice" && r["kind"] == "off").collect();
    let sleeping = |tid: u64| -> Vec<&Value> {
        slices.iter().copied().filter(|s| s["tid"] == tid && (s["state"] == "S" || s["state"] == "D")).collect()
    };
    let dur = |s: &&Value| s["end_ns"].as_u64().unwrap() - s["start_ns"].as_u64().unwrap();
    for (waiter, waker) in [("consumer", "producer"), ("reader", "writer")] {
        let blocked = sleeping(t.tid[waiter]);
        let total: u64 = blocked.iter().map(dur).sum();
        let right: u64 = blocked
            .iter()
            .filter(|s| {
                let w = &s["waker"];
                w["context"] == "thread" && w["tid"] == t.tid[waker] && w["comm"] == waker
            })
            .map(dur)
            .sum();
        let share = right as f64 / total.max(1) as f64;
        eprintln!("{waiter}: {} sleeping slices, {total} ns, {:.1}% woken by {waker}", blocked.len(), share * 100.0);
        let (wall, cpu) = t.funcs[waiter].values().fold((0, 0), |a, v| (a.0 + v.0, a.1 + v.1));
        assert!(total as f64 >= 0.5 * (wall - cpu) as f64, "{waiter}: {total} ns of sleeping slices, truth {} off-CPU", wall - cpu);
        assert!(share >= 0.95, "{waiter}: only {:.1}% of its sleeping slices name {waker}", share * 100.0);
    }
    let blocked = sleeping(t.tid["sleeper"]);
    let total: u64 = blocked.iter().map(dur).sum();
    let timer: u64 = blocked.iter().filter(|s| s["waker"]["context"] == "timer").map(dur).sum();
    eprintln!("sleeper: {} sleeping slices, {total} ns, {:.1}% woken by [timer]", blocked.len(), timer as f64 * 100.0 / total.max(1) as f64);
    assert!(timer as f64 >= 0.95 * total as f64, "sleeper: {timer} of {total} ns of its slices woken by [timer]");

    // The trace: the waker in the slice's args, and an s/f flow pair.
    let dir = sym.parent().unwrap().to_path_buf();
    let path = dir.join("trace.json");
    util::ok("wcexport", &["--trace", sym.to_str().unwrap(), "-o", path.to_str().unwrap()], b"");
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let ev = trace["traceEvents"].as_array().unwrap();
    let label = format!("producer ({})", t.tid["producer"]);
    let woken: Vec<&Value> =
        ev.iter().filter(|e| e["ph"] == "X" && e["tid"] == t.tid["consumer"] && e["args"]["waker"] == label.as_str()).collect();
    assert!(!woken.is_empty(), "no consumer slice names {label} in the trace");
    assert!(woken.iter().any(|e| e["args"]["waker_stack"].as_array().is_some_and(|a| !a.is_empty())), "no waker stack in args");
    assert!(
        ev.iter().any(|e| e["ph"] == "X" && e["tid"] == t.tid["sleeper"] && e["args"]["waker"] == "[timer]"),
        "no sleeper slice names [timer]"
    );
    let flows = |ph: &str| -> HashMap<u64, &Value> {
        ev.iter().filter(|e| e["ph"] == ph && e["cat"] == "wake").map(|e| (e["id"].as_u64().unwrap(), e)).collect()
    };
    let (s, f) = (flows("s"), flows("f"));
    assert!(!s.is_empty() && s.len() == f.len(), "{} flow starts, {} ends", s.len(), f.len());
    let pairs = s
        .iter()
        .filter(|(id, st)| {
            st["tid"] == t.tid["producer"]
                && f.get(id).is_some_and(|fe| fe["tid"] == t.tid["consumer"] && fe["bp"] == "e" && fe["ts"] == st["ts"])
        })
        .count();
    eprintln!("trace: {} flows, {pairs} producer -> consumer", s.len());
    assert!(pairs > 0, "no producer -> consumer flow pair");
}
