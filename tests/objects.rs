//! What each wait was for (`object` in wallclock-stream(5)): a program
//! whose threads each wait on one object (tests/programs/objects/objects.c:
//! a file written and fdatasync'ed, a TCP connection to 127.0.0.1, a pipe,
//! a global mutex, a malloc'd mutex, a child process), each timing its
//! own waits, run under
//! `wallclock`: each thread's waits must be under its own object, named as
//! a user names it, in the merged stream, the folded stacks and the
//! report's WAITED ON section, and with `--timeline` in the trace's
//! slice arguments (wcexport --trace). The
//! capture tests load real BPF programs: run as root (they skip, saying
//! so, otherwise).

mod util;

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;

/// The tests here one at a time: each times its threads' waits against
/// their off-CPU time, which a second such program beside it inflates.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// One measured thread, as the program reports it.
struct Own {
    name: String,
    tid: u64,
    wait_ns: u64,
    port: u64,
}

/// Each thread's time runnable (waiting for a CPU), as the capture
/// measured it: a wait by the thread's own clock holds the time it waited
/// for a CPU once woken (the locker and heaplock run at nice 19, and a
/// busy machine keeps them off a CPU for a tenth of their wait), which is
/// the CPU's, not the object's, and is shown as runnable.
fn runnable_ns(stream: &str) -> BTreeMap<u32, u64> {
    util::per_thread(stream, |t| t.off_ns.as_ref().map_or(0, |o| o.r))
}

fn own(stdout: &str) -> Vec<Own> {
    stdout
        .lines()
        .filter(|l| l.starts_with("{\"name\""))
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l}: {e}"));
            let u = |k: &str| v[k].as_u64().unwrap();
            Own { name: v["name"].as_str().unwrap().to_string(), tid: u("tid"), wait_ns: u("wait_ns"), port: u("port") }
        })
        .collect()
}

/// The object a thread must wait on, and whether a name is it.
fn expected(o: &Own, dir: &str) -> Box<dyn Fn(&str) -> bool> {
    match o.name.as_str() {
        "disk" => {
            let want = format!("file {dir}/ledger.dat");
            Box::new(move |n| n == want)
        }
        "tcpread" => {
            let want = format!("tcp 127.0.0.1:{}", o.port);
            Box::new(move |n| n == want)
        }
        "piperead" => Box::new(|n| n == "pipe"),
        "locker" => Box::new(|n| n == "lock g_ledger_lock"),
        // On the heap: named by the function that blocks on it.
        "heaplock" => Box::new(|n| n == "lock in settle_account"),
        "waiter" => Box::new(|n| n.starts_with("child sleep ") && n["child sleep ".len()..].parse::<u32>().is_ok()),
        other => panic!("unknown thread {other}"),
    }
}

/// `wallclock -- objects 4 DIR`: in the merged stream each thread's waits
/// (by its own clock; the disk thread's less its CPU clock, the kernel's
/// work for its calls; each less its time runnable, [`runnable_ns`]) are
/// at least 95% under its own object, at most 5%
/// of its off-CPU time under any other object, and the folded stacks
/// show each object as a frame after the state.
#[test]
fn each_wait_is_under_its_object() {
    if util::skip_without_root("objects") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = util::scratch("objects");
    let bin = util::build_c("tests/programs/objects/objects.c", &dir, "objects");
    let prefix = dir.join("p");
    let d = dir.to_str().unwrap();
    let out = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["--prefix", prefix.to_str().unwrap(), "--"])
        .arg(&bin)
        .args(["4", d])
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "wallclock failed: {err}");
    let threads = own(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(threads.len(), 6, "six measured threads: {}", String::from_utf8_lossy(&out.stdout));

    // The merged stream, its stack table resolved: each stack's object is
    // the frame after its state leaf.
    let text = util::resolved(&std::fs::read_to_string(dir.join("p.stream")).unwrap());
    let recs: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut by: BTreeMap<u64, BTreeMap<String, u64>> = BTreeMap::new();
    for r in recs.iter().filter(|r| r["type"] == "stack" && r["kind"] == "off") {
        let funcs: Vec<&str> = r["frames"].as_array().map_or(Vec::new(), |a| a.iter().filter_map(|f| f["func"].as_str()).collect());
        let obj = wallclock_stream::accounting::object_of(&funcs).unwrap_or("").to_string();
        *by.entry(r["tid"].as_u64().unwrap()).or_default().entry(obj).or_default() += r["ns"].as_u64().unwrap();
    }
    let runnable = runnable_ns(&text);
    for o in &threads {
        let is_own = expected(o, d);
        let objs = by.get(&o.tid).unwrap_or_else(|| panic!("no off-CPU stacks of {} ({})", o.name, o.tid));
        let r = runnable.get(&(o.tid as u32)).copied().unwrap_or(0);
        let off: u64 = objs.values().sum();
        let mine: u64 = objs.iter().filter(|(n, _)| is_own(n)).map(|(_, v)| v).sum();
        let others: u64 = objs.iter().filter(|(n, _)| !n.is_empty() && !is_own(n)).map(|(_, v)| v).sum();
        eprintln!(
            "{}: waited {:.3} s by its clock (runnable {:.3} s), off-CPU {:.3} s, {:.3} s under its object, {:.3} s under others: {objs:?}",
            o.name,
            o.wait_ns as f64 / 1e9,
            r as f64 / 1e9,
            off as f64 / 1e9,
            mine as f64 / 1e9,
            others as f64 / 1e9
        );
        assert!(o.wait_ns > 2_000_000_000, "{} waited only {} ns", o.name, o.wait_ns);
        assert!(mine as f64 >= 0.95 * o.wait_ns.saturating_sub(r) as f64, "{}: {mine} ns under its object of {} ns waited, {r} ns of it runnable: {objs:?}", o.name, o.wait_ns);
        assert!(others as f64 <= 0.05 * off as f64, "{}: {others} ns of {off} under other objects: {objs:?}", o.name);
    }

    // The folded stacks: each object a frame right after a state.
    let folded = std::fs::read_to_string(dir.join("p.folded")).unwrap();
    let port = threads[0].port;
    for want in [
        format!("[file {d}/ledger.dat]"),
        format!("[tcp 127.0.0.1:{port}]"),
        "[pipe]".into(),
        "[lock g_ledger_lock]".into(),
        "[lock in settle_account]".into(),
        "[child sleep ".into(),
    ] {
        assert!(
            folded.lines().any(|l| ["[sleep];", "[io];", "[runnable];"].iter().any(|s| l.contains(&format!("{s}{want}")))),
            "no folded line with {want} after a state"
        );
    }

    // The heap lock's thread's waits in the folded lines (µs): under
    // settle_account and the lock named by it.
    let heap = threads.iter().find(|o| o.name == "heaplock").unwrap();
    let under: f64 = folded
        .lines()
        .filter(|l| l.contains(";settle_account;") && l.contains(";[lock in settle_account]_[o] "))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum();
    eprintln!("heaplock: waited {:.3} s, {:.3} s in the folded lines under [lock in settle_account]", heap.wait_ns as f64 / 1e9, under / 1e6);
    assert!(under >= 0.95 * heap.wait_ns as f64 / 1e3, "{under} us under [lock in settle_account] of {} ns waited", heap.wait_ns);

    // The report's WAITED ON section, and its JSON: each thread's heaviest
    // object is its own, with at least 95% of its waits; the heap lock
    // with its address beside its name.
    let report = std::fs::read_to_string(dir.join("p_thread_analysis.txt")).unwrap();
    assert!(report.contains("WAITED ON") && report.contains("[lock g_ledger_lock]"), "no WAITED ON section with the lock:\n{report}");
    assert!(report.contains("[lock in settle_account] (0x"), "no heap lock named by its call site, with its address:\n{report}");
    let out = Command::new(util::bin("wcreport")).arg("--json").arg(dir.join("p.stream")).output().unwrap();
    assert!(out.status.success());
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    for o in &threads {
        let heaviest = json["waited_on"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|w| Some((w["threads"].as_array()?.iter().find(|t| t["tid"] == o.tid)?["ns"].as_u64()?, w["object"].as_str()?)))
            .max()
            .unwrap_or_else(|| panic!("{} ({}) waited on nothing in the report", o.name, o.tid));
        assert!(expected(o, d)(heaviest.1), "{}: its heaviest object in the report is {}", o.name, heaviest.1);
    }
    let heap_lock = json["waited_on"].as_array().unwrap().iter().find(|w| w["object"] == "lock in settle_account").unwrap();
    assert!(heap_lock["raw"][0].as_str().is_some_and(|r| r.starts_with("lock 0x")), "the heap lock's address: {heap_lock}");
    let in_report = heap_lock["threads"].as_array().unwrap().iter().find(|t| t["tid"] == heap.tid).map_or(0, |t| t["ns"].as_u64().unwrap());
    let r = runnable.get(&(heap.tid as u32)).copied().unwrap_or(0);
    assert!(in_report as f64 >= 0.95 * heap.wait_ns.saturating_sub(r) as f64, "heaplock: {in_report} ns under its lock in the report of {} ns waited, {r} ns of it runnable", heap.wait_ns);
}

/// `offcputime --timeline -- objects 3 DIR | wcexport --trace`: each
/// off-CPU slice carries what it waited on as its `object` argument: each
/// measured thread's waits (by its own clocks less its runnable time, as
/// above) are at least 95%
/// in slices naming its own object, at most 5% of its off-CPU slices name
/// another.
#[test]
fn trace_slices_name_their_object() {
    if util::skip_without_root("objects") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = util::scratch("objects-trace");
    let bin = util::build_c("tests/programs/objects/objects.c", &dir, "objects");
    let stream = dir.join("off.stream");
    let d = dir.to_str().unwrap();
    let out = Command::new(util::bin("offcputime"))
        .arg("--timeline")
        .arg("-o")
        .arg(&stream)
        .arg("--")
        .arg(&bin)
        .args(["3", d])
        .output()
        .unwrap();
    assert!(out.status.success(), "offcputime failed: {}", String::from_utf8_lossy(&out.stderr));
    let threads = own(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(threads.len(), 6, "six measured threads: {}", String::from_utf8_lossy(&out.stdout));
    let trace = dir.join("trace.json");
    util::ok("wcexport", &["--trace", stream.to_str().unwrap(), "-o", trace.to_str().unwrap()], b"");
    let t: Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    // Off-CPU µs by thread and object (none: "").
    let mut by: BTreeMap<u64, BTreeMap<String, f64>> = BTreeMap::new();
    for e in t["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X" && e["cat"] == "off") {
        let obj = e["args"]["object"].as_str().unwrap_or("").to_string();
        *by.entry(e["tid"].as_u64().unwrap()).or_default().entry(obj).or_default() += e["dur"].as_f64().unwrap();
    }
    let runnable = runnable_ns(&std::fs::read_to_string(&stream).unwrap());
    for o in &threads {
        let is_own = expected(o, d);
        let objs = by.get(&o.tid).unwrap_or_else(|| panic!("no off-CPU slices of {} ({})", o.name, o.tid));
        let mine: f64 = objs.iter().filter(|(n, _)| is_own(n)).map(|(_, v)| v).sum();
        let off: f64 = objs.values().sum();
        let wait_us = o.wait_ns.saturating_sub(runnable.get(&(o.tid as u32)).copied().unwrap_or(0)) as f64 / 1e3;
        eprintln!("{}: waited {:.3} s by its clock less its runnable time, {:.3} s of slices naming its object: {objs:?}", o.name, wait_us / 1e6, mine / 1e6);
        assert!(o.wait_ns > 1_500_000_000, "{} waited only {} ns", o.name, o.wait_ns);
        let others: f64 = objs.iter().filter(|(n, _)| !n.is_empty() && !is_own(n)).map(|(_, v)| v).sum();
        assert!(mine >= 0.95 * wait_us, "{}: {mine} us of slices under its object of {wait_us} us waited (less its runnable time): {objs:?}", o.name);
        assert!(others <= 0.05 * off, "{}: {others} us of its {off} us of off-CPU slices under other objects: {objs:?}", o.name);
    }
}
