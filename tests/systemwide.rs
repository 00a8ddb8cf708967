//! System-wide capture, as the off-CPU article runs it on an idle
//! machine: `offcputime -d 5` with no target, a `sleep 3` and a `vmstat 1`
//! started before it, a zombie held through it and a headless Chromium
//! started in it (a burst of short-lived threads and new stacks).
//! Checked against /proc (every process alive through
//! the window is in the stream; each checked thread's on-CPU time against
//! its own CPU clock from schedstat) and against the processes' own
//! timers (the sleep under its nanosleep stack). Root only (skips saying
//! so otherwise).

mod util;

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn records(text: &str) -> Vec<Value> {
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:.200}: {e}"))).collect()
}

/// Process ids in /proc now.
fn pids() -> BTreeSet<u64> {
    std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// A thread's CPU clock (ns) from schedstat.
fn clock(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/schedstat")).unwrap();
    s.split_whitespace().next().unwrap().parse().unwrap()
}

/// A child of `parent` that has exited and not been reaped (state Z).
fn zombie_of(parent: u32) -> Option<u64> {
    pids().into_iter().find(|p| {
        let st = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        // pid (comm) state ppid ...: the comm may hold spaces.
        let mut f = st.rsplit_once(") ").map_or("", |(_, r)| r).split_whitespace();
        f.next() == Some("Z") && f.next() == Some(&parent.to_string())
    })
}

fn spawn(cmd: &str) -> Child {
    Command::new("sh").args(["-c", cmd]).stdout(Stdio::null()).spawn().unwrap()
}

/// Wait until `f` exists (the capture's --ready-file).
fn wait_for(f: &Path) {
    let t = Instant::now();
    while !f.exists() {
        assert!(t.elapsed() < Duration::from_secs(30), "the capture never got ready");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn frames_text(s: &Value) -> String {
    s["frames"].as_array().map(|f| f.iter().filter_map(|x| x["func"].as_str()).collect::<Vec<_>>().join(";")).unwrap_or_default()
}

#[test]
fn idle_machine_example() {
    if util::skip_without_root("systemwide") {
        return;
    }
    let dir = util::scratch("systemwide-idle");
    let ready = dir.join("ready");
    let out = dir.join("off.jsonl");
    // Started before the capture, as in the article: both are blocked in
    // their timers when it begins.
    let mut sleep = Command::new("sleep").arg("3").spawn().unwrap();
    let vmstat = Command::new("vmstat").arg("1").stdout(Stdio::null()).spawn().unwrap();
    // An exited child never reaped (its parent execs a sleep): a zombie
    // through the window, as a build's or a browser's children are for a
    // moment. It has no stack and no time left; taken for a thread blocked
    // all window, it was a whole window of [lost stack].
    let mut reaper = spawn("true & exec sleep 30");
    std::thread::sleep(Duration::from_millis(200));
    let zombie = zombie_of(reaper.id()).expect("no zombie child of `true & exec sleep 30`");
    let cap = Command::new(util::bin("offcputime"))
        .args(["-d", "5", "--ready-file"])
        .arg(&ready)
        .arg("-o")
        .arg(&out)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&ready);
    let before = pids();
    // A real browser starting in the window: dozens of processes and
    // threads born, most blocking once in a new place and exiting, a few
    // thousand new stacks in half a second. On a loaded machine their
    // copies filled the ring buffer and were dropped: 3% of the
    // thread-time under [lost stack].
    let page = dir.join("page.svg");
    std::fs::write(&page, r#"<svg xmlns="http://www.w3.org/2000/svg" width="300" height="200"><rect width="150" height="100" fill="red"/></svg>"#).unwrap();
    let browser_dir = dir.join("in-window");
    std::fs::create_dir_all(&browser_dir).unwrap();
    let browser = std::thread::spawn(move || util::browser::screenshot(&page, &browser_dir));
    let vm_before = clock(vmstat.id());
    // A thread that works in the window (about 0.2 s of CPU, all in the
    // shell itself), then sleeps until the capture is over: its clock is
    // read before and after.
    let busy = spawn("sleep 1; i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; exec sleep 30");
    let busy_before = clock(busy.id());
    let capo = cap.wait_with_output().unwrap();
    assert!(capo.status.success(), "offcputime failed: {}", String::from_utf8_lossy(&capo.stderr));
    let after = pids();
    let (vm_after, busy_after) = (clock(vmstat.id()), clock(busy.id()));
    let (sleep_pid, vm_pid, busy_pid) = (sleep.id() as u64, vmstat.id() as u64, busy.id() as u64);
    let _ = sleep.wait();
    let shot = browser.join().expect("the browser in the window failed");
    assert!(shot.count(|(r, g, b)| r > 200 && g < 60 && b < 60) > 0, "the browser drew nothing");
    let _ = reaper.kill();
    let _ = reaper.wait();
    for mut c in [vmstat, busy] {
        let _ = c.kill();
        let _ = c.wait();
    }

    // Symbolized as a user would (`| stacksym`), then checked.
    let raw = std::fs::read(&out).unwrap();
    let sym = util::ok("stacksym", &[], &raw);
    let recs = records(&util::resolved(&sym));
    let hdr = &recs[0];
    assert_eq!(hdr["type"], "header");
    // System-wide: no target pids, no command (wallclock-stream(5)).
    assert!(hdr["pids"].is_null() && hdr["command"].is_null(), "the header names a target: {hdr}");
    let window = u(&hdr["end_ns"]) - u(&hdr["start_ns"]);
    let threads: Vec<&Value> = recs.iter().filter(|r| r["type"] == "thread").collect();
    let stacks: Vec<&Value> = recs.iter().filter(|r| r["type"] == "stack").collect();

    // Every process alive before and after the window is in the stream.
    let seen: BTreeSet<u64> = threads.iter().map(|t| u(&t["pid"])).collect();
    let missing: Vec<u64> = before.intersection(&after).filter(|p| !seen.contains(p)).copied().collect();
    assert!(missing.is_empty(), "processes alive through the window but not in the stream: {missing:?}");

    // The browser ran in the window and was captured.
    let hstart = u(&hdr["start_ns"]);
    assert!(
        threads.iter().any(|t| t["comm"] == "chromium" && u(&t["start_ns"]) > hstart),
        "no chromium process born in the window"
    );

    // Each thread's time adds up to its time alive; nothing runs more than
    // the CPUs could give (the part of on-CPU time no task clock counted,
    // steal, aside: the scheduler's own time at each switch).
    let cpus = std::thread::available_parallelism().unwrap().get() as u64;
    let (mut on, mut steal, mut alive) = (0u64, 0u64, 0u64);
    for t in &threads {
        let off: u64 = t["off_ns"].as_object().unwrap().values().map(u).sum();
        let life = u(&t["end_ns"]) - u(&t["start_ns"]);
        assert!(u(&t["on_ns"]) + off == life, "thread {} does not add up: {t}", t["tid"]);
        on += u(&t["on_ns"]);
        steal += u(&t["steal_ns"]);
        alive += life;
    }
    assert!(on - steal <= cpus * window, "on-CPU {on} ns (steal {steal}) in {window} ns on {cpus} CPUs");

    // [lost stack]: under 0.5% of the thread-time.
    let lost: u64 = stacks.iter().filter(|s| frames_text(s).contains("[lost stack]")).map(|s| u(&s["ns"])).sum();
    let stats = recs.iter().find(|r| r["type"] == "stats");
    let worst: Vec<String> = stacks
        .iter()
        .filter(|s| frames_text(s).contains("[lost stack]"))
        .map(|s| format!("{} {} {} {} ns", s["comm"], s["tid"], s["state"], s["ns"]))
        .take(8)
        .collect();
    let count = |k: &str| stats.map_or(0, |s| u(&s["counts"][k]));
    eprintln!(
        "[lost stack] {lost} ns of {alive} ns thread-time ({:.3}%); map_full {}, ringbuf_drops {}, ustack_cut {}, new_stacks {}, missed_switches {}",
        lost as f64 * 100.0 / alive.max(1) as f64,
        count("map_full"),
        count("ringbuf_drops"),
        count("ustack_cut"),
        count("new_stacks"),
        count("missed_switches")
    );
    assert!(lost * 200 < alive, "[lost stack] {lost} ns of {alive} ns thread-time: {worst:?}; {stats:?}");
    // The zombie: in the stream, with no time in the window.
    let z = threads.iter().find(|t| u(&t["tid"]) == zombie).unwrap_or_else(|| panic!("zombie {zombie} not in the stream"));
    assert_eq!(u(&z["end_ns"]), u(&z["start_ns"]), "a zombie has no life in the window: {z}");

    let thread = |pid: u64| *threads.iter().find(|t| u(&t["tid"]) == pid).unwrap_or_else(|| panic!("no thread {pid}"));
    let under_timer = |pid: u64| -> u64 {
        stacks.iter().filter(|s| u(&s["tid"]) == pid && s["kind"] == "off" && frames_text(s).contains("nanosleep")).map(|s| u(&s["ns"])).sum()
    };
    // The sleep: blocked since before the capture, in its timer for all
    // of its time in the window (the exit aside).
    let st = thread(sleep_pid);
    let st_life = u(&st["end_ns"]) - u(&st["start_ns"]);
    assert!(under_timer(sleep_pid) * 100 >= st_life * 95, "sleep: {} of {st_life} ns under nanosleep", under_timer(sleep_pid));
    // vmstat: wakes each second, blocks in its timer again.
    let vt = thread(vm_pid);
    let vt_off: u64 = vt["off_ns"].as_object().unwrap().values().map(u).sum();
    assert!(under_timer(vm_pid) * 100 >= vt_off * 90, "vmstat: {} of {vt_off} ns off-CPU under nanosleep", under_timer(vm_pid));

    // On-CPU time per thread against the thread's own clock.
    for (pid, clk) in [(vm_pid, vm_after - vm_before), (busy_pid, busy_after - busy_before)] {
        let on = u(&thread(pid)["on_ns"]);
        eprintln!("pid {pid}: on-CPU {on} ns, its clock {clk} ns");
        assert!(on.abs_diff(clk) < 50_000_000, "pid {pid}: on-CPU {on} ns, its clock says {clk} ns");
    }
    assert!(busy_after - busy_before > 100_000_000, "the busy thread hardly ran: {} ns", busy_after - busy_before);

    // The article's graph: symbolized, merged, drawn; a real XML parser
    // reads it whole.
    let merged = util::ok("stackmerge", &[], sym.as_bytes());
    let svg = util::ok("flame", &[], merged.as_bytes());
    let mut r = quick_xml::Reader::from_str(&svg);
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut in_title = false;
    loop {
        match r.read_event().unwrap_or_else(|e| panic!("SVG is not XML at {}: {e}", r.buffer_position())) {
            quick_xml::events::Event::Eof => break,
            quick_xml::events::Event::Start(e) => in_title = e.name().as_ref() == b"title",
            quick_xml::events::Event::Text(t) if in_title => {
                *names.entry(t.unescape().unwrap().to_string()).or_default() += 1;
            }
            _ => {}
        }
    }
    assert!(names.keys().any(|n| n.starts_with("vmstat")), "no vmstat box in the graph");
    assert!(names.keys().any(|n| n.contains("nanosleep")), "no nanosleep box in the graph");
    // And a real browser draws it: frames on the screen, the title whole.
    let svg_path = dir.join("machine.svg");
    std::fs::write(&svg_path, &svg).unwrap();
    util::browser::screenshot(&svg_path, &dir).assert_readable("system-wide graph", 0.05);
}

/// A capture whose stack map fills says so at its end, on stderr, with
/// the count, the time and the flag that helps (as bcc does).
#[test]
fn lost_stacks_are_said_at_the_end() {
    if util::skip_without_root("systemwide") {
        return;
    }
    let dir = util::scratch("systemwide-lost");
    let out = dir.join("off.jsonl");
    let o = Command::new(util::bin("offcputime"))
        .args(["--stack-storage-size", "8", "-d", "2", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    let recs = records(&std::fs::read_to_string(&out).unwrap());
    let stats = &recs.last().unwrap()["counts"];
    let n = u(&stats["lost_stacks"]);
    assert!(n > 0 && u(&stats["map_full"]) > 0, "a map of 64 stacks did not fill system-wide: {stats}");
    let line = err.lines().find(|l| l.contains("[lost stack]")).unwrap_or_else(|| panic!("nothing said on stderr: {err}"));
    assert!(line.starts_with("offcputime: warning: ") && line.contains(&format!("{n} blocks")), "{line}");
    assert!(line.contains("--stack-storage-size"), "the flag that helps is not named: {line}");
    let secs = format!("{:.3} s", u(&stats["lost_stack_ns"]) as f64 / 1e9);
    assert!(line.contains(&secs), "the time ({secs}) is not said: {line}");
}
