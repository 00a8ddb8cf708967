//! What a reader of wcreport's text sees: per thread, their own functions
//! first with the call and kernel reason they waited in; one section per
//! process; the modules whose time has no name, with what to install.
//! The streams here are shaped as stacksym and stackmerge write them
//! (module file names, maps records with paths and build ids, kernel
//! frames, state leaves); the real captures are in wcreport_capture.rs.

mod util;

use serde_json::Value;
use util::{ok, scratch};
use wallclock_stream::units::human_ns;
use wallclock_stream::{Frame, Header, Kind, MapEntry, Maps, Record, Stack, State, StateNs, Thread};

const TOOL: &str = "wcreport";
const START: u64 = 10_000_000_000;
const END: u64 = 12_000_000_000;
const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";
const APP: &str = "/opt/app/bin/app";
const APP_ID: &str = "ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12";

fn jsonl(recs: &[Record]) -> String {
    recs.iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect()
}

fn thread(pid: u32, tid: u32, comm: &str, life: (u64, u64), on: u64, off: StateNs) -> Record {
    let mut t = Thread::new(pid, tid, comm);
    (t.start_ns, t.end_ns, t.on_ns, t.off_ns) = (Some(life.0), Some(life.1), Some(on), Some(off));
    Record::Thread(t)
}

/// A frame as stacksym writes it: `u:func@module`, `k:func` (kernel),
/// `[leaf]`; module by file name, as stacksym names it.
fn fr(spec: &str) -> Frame {
    if let Some(k) = spec.strip_prefix("k:") {
        return Frame { module: Some("[kernel]".into()), ..Frame::kernel(k) };
    }
    match spec.split_once('@') {
        Some((f, m)) => Frame { module: Some(m.to_string()), ..Frame::named(f) },
        None => Frame::named(spec),
    }
}

fn stack(pid: u32, tid: u32, kind: Kind, state: Option<State>, frames: &[&str], ns: u64) -> Record {
    let mut s = Stack::new(kind, pid, tid, "");
    s.state = state;
    s.frames = frames.iter().map(|f| fr(f)).collect();
    if let Some(st) = state {
        s.frames.push(Frame::named(st.leaf_name()));
    }
    // As stackmerge writes them: on-CPU counts are samples, in proportion to ns.
    (s.ns, s.count) = (ns, ns / MS);
    Record::Stack(s)
}

fn maps(pid: u32) -> Record {
    let e = |path: &str, id: Option<&str>| MapEntry {
        start: 0x1000,
        end: 0x2000,
        offset: 0,
        path: path.into(),
        build_id: id.map(String::from),
    };
    Record::Maps(Maps { pid, maps: vec![e(APP, Some(APP_ID)), e(LIBC, None), e("[vdso]", None)], names: vec![], pgen: None })
}

fn header(pids: Vec<u32>) -> Record {
    let mut h = Header::new("stackmerge", "test");
    (h.pids, h.start_ns, h.end_ns) = (pids, Some(START), Some(END));
    Record::Header(h)
}

const SYSCALL: [&str; 2] = ["k:entry_SYSCALL_64_after_hwframe", "k:do_syscall_64"];
const SCHED: [&str; 2] = ["k:schedule", "k:__schedule"];
const MS: u64 = 1_000_000;

/// One process (pid 500, `app`) of one thread, 2 s alive: a journal
/// writer that is on-CPU 100 ms and in fdatasync 600 ms, a compute loop
/// (700 ms on-CPU, 100 ms preempted), a condition wait 300 ms, an
/// unnamed function 200 ms on-CPU.
fn app() -> Vec<Record> {
    let root = ["_start@app", "__libc_start_main_impl@libc.so.6", "main@app"];
    let with = |rest: &[&str]| -> Vec<&'static str> {
        root.iter().chain(rest).map(|s| &*Box::leak(s.to_string().into_boxed_str())).collect()
    };
    let fsync: Vec<&str> = [
        &["write_journal@app", "__GI_fdatasync@libc.so.6"][..],
        &SYSCALL,
        &["k:__x64_sys_fdatasync", "k:do_fsync", "k:ext4_sync_file", "k:jbd2_log_wait_commit"],
        &["k:io_schedule"],
        &SCHED,
    ]
    .concat();
    let cond: Vec<&str> = [
        &["wait_for_work@app", "___pthread_cond_timedwait64@libc.so.6", "__futex_abstimed_wait_common@libc.so.6"][..],
        &SYSCALL,
        &["k:__x64_sys_futex", "k:do_futex", "k:futex_wait", "k:__futex_wait", "k:futex_do_wait"],
        &SCHED,
    ]
    .concat();
    let preempt: Vec<&str> =
        [&["compute_chunk@app", "k:asm_sysvec_apic_timer_interrupt", "k:irqentry_exit_to_user_mode"][..], &SCHED]
            .concat();
    vec![
        header(vec![500]),
        maps(500),
        thread(500, 500, "app", (START, END), 1_000 * MS, StateNs { r: 100 * MS, s: 300 * MS, d: 600 * MS, other: 0 }),
        stack(500, 500, Kind::On, None, &with(&["write_journal@app"]), 100 * MS),
        stack(500, 500, Kind::Off, Some(State::D), &with(&fsync), 600 * MS),
        stack(500, 500, Kind::On, None, &with(&["compute_chunk@app"]), 700 * MS),
        stack(500, 500, Kind::Off, Some(State::R), &with(&preempt), 100 * MS),
        stack(500, 500, Kind::Off, Some(State::S), &with(&cond), 300 * MS),
        stack(500, 500, Kind::On, None, &with(&["app+0x1a2b"]), 200 * MS),
    ]
}

fn lines_of(txt: &str) -> Vec<&str> {
    txt.lines().map(str::trim).collect()
}

#[test]
fn own_function_first_then_call_and_kernel_reason() {
    let txt = ok(TOOL, &[], jsonl(&app()).as_bytes());
    let l = lines_of(&txt);
    let has = |want: &str| l.iter().any(|x| x == &want);
    // 100% = alive 2 s: shares are ns / 2 s.
    assert!(has("35.0%  700 ms  write_journal"), "{txt}");
    assert!(has("30.0%  600 ms    write_journal → fdatasync → [D] jbd2_log_wait_commit"), "{txt}");
    assert!(has("5.0%  100 ms    write_journal [on-CPU]"), "{txt}");
    assert!(has("40.0%  800 ms  compute_chunk"), "{txt}");
    assert!(has("35.0%  700 ms    compute_chunk [on-CPU]"), "{txt}");
    assert!(has("5.0%  100 ms    compute_chunk → [R] preempted"), "{txt}");
    assert!(has("15.0%  300 ms  wait_for_work → pthread_cond_timedwait64 → [S] futex_wait"), "{txt}");
    assert!(has("10.0%  200 ms  app+0x1a2b (no name) [on-CPU]"), "{txt}");
    // Heaviest first; no kernel stack cut before the user code.
    let pos = |s: &str| txt.find(s).unwrap_or_else(|| panic!("{s}: {txt}"));
    assert!(pos("  compute_chunk\n") < pos("  write_journal\n") && pos("  write_journal\n") < pos("wait_for_work →"));
    assert!(!txt.contains("__schedule") && !txt.contains(" <- "), "{txt}");
    // The JSON: the same, in ns, and the whole stacks still there.
    let v: Value = serde_json::from_str(&ok(TOOL, &["--json"], jsonl(&app()).as_bytes())).unwrap();
    let f = &v["threads"][0]["functions"];
    assert_eq!((f[1]["func"].as_str(), f[1]["ns"].as_u64()), (Some("write_journal"), Some(700 * MS)));
    assert_eq!(f[1]["module"], APP, "the module's path, from the maps record");
    assert_eq!(f[1]["parts"][0]["call"], "fdatasync");
    assert_eq!(f[1]["parts"][0]["reason"], "jbd2_log_wait_commit");
    assert_eq!(f[1]["parts"][0]["state"], "D");
    let top_off = v["threads"][0]["top"]["off"][0]["stack"].as_str().unwrap();
    assert!(top_off.starts_with("_start;__libc_start_main_impl;main;write_journal;__GI_fdatasync;"), "{top_off}");
    // --top 1: one function, one way of it, the rest summed and counted.
    let one = ok(TOOL, &["--top", "1"], jsonl(&app()).as_bytes());
    let l1 = lines_of(&one);
    assert!(
        l1.contains(&"35.0%  700 ms    compute_chunk [on-CPU]")
            && l1.contains(&"5.0%  100 ms    (1 more way(s) of compute_chunk)"),
        "{one}"
    );
    assert!(l1.contains(&"60.0%  1.20 s  (3 more function(s))"), "{one}");
}

#[test]
fn system_libraries_and_missing_user_stacks_fall_back() {
    let recs = vec![
        header(vec![600]),
        thread(600, 600, "py", (START, END), 0, StateNs { s: 2_000 * MS, ..Default::default() }),
        // All in system libraries: the innermost frame outside libc stands in.
        stack(
            600,
            600,
            Kind::Off,
            Some(State::S),
            &["Py_RunMain@libpython3.11.so.1.0", "__GI___select@libc.so.6", "k:do_select"],
            1_200 * MS,
        ),
        // No user stack at all (unreadable): the process name.
        stack(600, 600, Kind::Off, Some(State::S), &["k:ret_from_fork", "k:kthread", "k:worker_thread"], 500 * MS),
        // Only the runtime: its innermost frame.
        stack(
            600,
            600,
            Kind::Off,
            Some(State::S),
            &["start_thread@libc.so.6", "__GI___clock_nanosleep@libc.so.6", "k:do_nanosleep"],
            300 * MS,
        ),
    ];
    let txt = ok(TOOL, &[], jsonl(&recs).as_bytes());
    let l = lines_of(&txt);
    assert!(l.contains(&"60.0%  1.20 s  Py_RunMain → select → [S] do_select"), "{txt}");
    assert!(
        l.contains(&"25.0%  500 ms  (py, no user stack) [S]")
            || l.contains(&"25.0%  500 ms  (py, no user stack) → [S] worker_thread"),
        "{txt}"
    );
    assert!(l.contains(&"15.0%  300 ms  __GI___clock_nanosleep → [S] do_nanosleep"), "{txt}");
}

/// A shell (pid 700) whose child gzip (pid 701) ran after exec, and a
/// process (pid 702) whose main thread left no record: its name is its
/// threads' most common one. Thread-time: 702 2.7 s, 700 2.0 s, 701 1.5 s.
fn tree() -> Vec<Record> {
    let idle = |ns: u64| StateNs { s: ns, ..Default::default() };
    let mut r = vec![header(vec![700])];
    r.push(thread(700, 700, "sh", (START, END), 10 * MS, idle(1_990 * MS)));
    r.push(stack(700, 700, Kind::Off, Some(State::S), &["main@sh", "wait4@libc.so.6", "k:do_wait"], 1_990 * MS));
    r.push(thread(701, 701, "gzip", (START, START + 1_500 * MS), 1_400 * MS, idle(100 * MS)));
    r.push(stack(701, 701, Kind::On, None, &["main@gzip", "deflate@gzip"], 1_400 * MS));
    for (tid, comm) in [(703, "py-worker"), (704, "py-worker"), (705, "py-other")] {
        r.push(thread(702, tid, comm, (START, START + 900 * MS), 900 * MS, idle(0)));
        r.push(stack(702, tid, Kind::On, None, &["run@py"], 900 * MS));
    }
    r
}

#[test]
fn one_section_per_process_heaviest_first() {
    let txt = ok(TOOL, &[], jsonl(&tree()).as_bytes());
    let procs: Vec<&str> = txt.lines().filter(|l| l.starts_with("PROCESS ")).collect();
    assert_eq!(procs.len(), 3, "{txt}");
    assert!(
        procs[0].starts_with("PROCESS 702 (py-worker): wall 2.00 s, 3 thread(s) alive 2.70 s thread-time"),
        "{}",
        procs[0]
    );
    assert!(procs[1].starts_with("PROCESS 700 (sh): wall 2.00 s, 1 thread(s) alive 2.00 s"), "{}", procs[1]);
    assert!(procs[2].starts_with("PROCESS 701 (gzip):"), "{}", procs[2]);
    assert!(procs[2].contains(&format!("on-CPU {}", human_ns(1_400 * MS))), "{}", procs[2]);
    // Each thread's detail sits in its process's section.
    let at = |s: &str| txt.find(s).unwrap_or_else(|| panic!("{s}: {txt}"));
    for (pid, tids) in [(702, &[703, 704, 705][..]), (700, &[700]), (701, &[701])] {
        let start = at(&format!("PROCESS {pid} "));
        let end = txt[start + 1..].find("\nPROCESS ").map_or(txt.len(), |i| start + 1 + i);
        for tid in tids {
            let t = at(&format!("THREAD {tid} "));
            assert!(start < t && t < end, "thread {tid} outside process {pid}: {txt}");
        }
    }
    assert!(txt.contains("  deflate [on-CPU]") && txt.contains("main → wait4 → [S] do_wait"), "{txt}");
    let v: Value = serde_json::from_str(&ok(TOOL, &["--json"], jsonl(&tree()).as_bytes())).unwrap();
    let names: Vec<&str> = v["processes"].as_array().unwrap().iter().map(|p| p["comm"].as_str().unwrap()).collect();
    assert_eq!(names, ["py-worker", "sh", "gzip"]);
    // --split-dir, as scripts/wallclock calls it: every thread of every process has its file.
    let dir = scratch("wcreport-tree");
    let prefix = dir.join("run");
    let tdir = dir.join("threads");
    ok(TOOL, &["--split-dir", tdir.to_str().unwrap(), "--prefix", prefix.to_str().unwrap()], jsonl(&tree()).as_bytes());
    let ov = std::fs::read_to_string(dir.join("run_thread_analysis.txt")).unwrap();
    assert_eq!(ov.lines().filter(|l| l.starts_with("PROCESS ")).count(), 3, "{ov}");
    for f in ["thread_700_main", "thread_701_main", "thread_703_worker", "thread_704_worker", "thread_705_py_other"] {
        let p = tdir.join(format!("{f}_analysis.txt"));
        assert!(p.exists(), "{} missing", p.display());
    }
}

#[test]
fn unnamed_time_per_module_with_what_to_install() {
    let txt = ok(TOOL, &[], jsonl(&app()).as_bytes());
    // app's own time: 700 + 800 + 300 + 200 ms, of which 200 ms unnamed.
    let want = format!(
        "{APP}: 10% of its time unnamed (200 ms of 2.00 s; not on this machine): build it with -g and keep its symbols, or place the debug file at /usr/lib/debug/.build-id/ab/{}.debug",
        &APP_ID[2..]
    );
    assert!(txt.lines().any(|l| l.trim() == want), "{want}\n{txt}");
    let v: Value = serde_json::from_str(&ok(TOOL, &["--json"], jsonl(&app()).as_bytes())).unwrap();
    let u = &v["unnamed"][0];
    assert_eq!(
        (u["ns"].as_u64(), u["unnamed_ns"].as_u64(), u["build_id"].as_str()),
        (Some(2_000 * MS), Some(200 * MS), Some(APP_ID))
    );
    // A module of a Debian package on this machine: its -dbgsym package.
    let owned = std::process::Command::new("dpkg-query").args(["-S", "/bin/gzip"]).output();
    if !owned.is_ok_and(|o| o.status.success()) {
        eprintln!("dpkg-query does not know /bin/gzip here: the package hint is not checked");
        return;
    }
    let mut recs = vec![header(vec![800]), thread(800, 800, "gzip", (START, END), 2_000 * MS, StateNs::default())];
    let mut m = Maps { pid: 800, maps: vec![], names: vec![], pgen: None };
    m.maps.push(MapEntry { start: 0x1000, end: 0x2000, offset: 0, path: "/usr/bin/gzip".into(), build_id: None });
    recs.push(Record::Maps(m));
    recs.push(stack(800, 800, Kind::On, None, &["gzip+0x4a1f0@gzip"], 1_500 * MS));
    recs.push(stack(
        800,
        800,
        Kind::On,
        None,
        &["gzip+0x3000@gzip", "__memcpy_avx_unaligned_erms@libc.so.6"],
        500 * MS,
    ));
    let txt = ok(TOOL, &[], jsonl(&recs).as_bytes());
    let want = "/usr/bin/gzip: 100% of its time unnamed (2.00 s of 2.00 s; stripped): install its debug symbols (apt install gzip-dbgsym, or place the debug file under /usr/lib/debug/.build-id/)";
    assert!(txt.lines().any(|l| l.trim() == want), "{want}\n{txt}");
    assert!(
        lines_of(&txt).contains(&"25.0%  500 ms  gzip+0x3000 (no name) → memcpy_avx_unaligned_erms [on-CPU]"),
        "{txt}"
    );
}

/// A C extension whose frames have no name but are never the innermost
/// (`_sqlite3` calling libsqlite3, under Python frames) is listed too,
/// with the time of the stacks holding its frames.
#[test]
fn unnamed_frames_inside_stacks_are_listed() {
    const EXT: &str = "/usr/lib/python3.11/lib-dynload/_sqlite3.cpython-311-x86_64-linux-gnu.so";
    let base = EXT.rsplit('/').next().unwrap();
    let mut recs = vec![header(vec![900]), thread(900, 900, "python3", (START, END), 1_900 * MS, StateNs::default())];
    let mut m = Maps { pid: 900, maps: vec![], names: vec![], pgen: None };
    m.maps.push(MapEntry { start: 0x1000, end: 0x2000, offset: 0, path: EXT.into(), build_id: None });
    recs.push(Record::Maps(m));
    let ext_frame = format!("{base}+0x7a10@{base}");
    recs.push(stack(900, 900, Kind::On, None, &["main@python3", "py::run:/a.py", &ext_frame, "sqlite3_step@libsqlite3.so.0"], 1_900 * MS));
    let txt = ok(TOOL, &[], jsonl(&recs).as_bytes());
    let line = txt.lines().find(|l| l.trim_start().starts_with(&format!("{EXT}:"))).unwrap_or_else(|| panic!("{EXT} not listed:\n{txt}"));
    assert!(line.contains("unnamed frames inside 1.90 s of stacks"), "{line}");
    let v: Value = serde_json::from_str(&ok(TOOL, &["--json"], jsonl(&recs).as_bytes())).unwrap();
    let u = v["unnamed"].as_array().unwrap().iter().find(|u| u["module"] == EXT).expect("in --json");
    assert_eq!(u["inside_ns"].as_u64(), Some(1_900 * MS));
}
