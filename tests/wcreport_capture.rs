//! wcreport on real captures of a workload that measures its own time per
//! function (tests/programs/wcreport/own.c): `offcputime -p` and
//! `oncputime -p`, each through `stacksym`, merged by `stackmerge --on`.
//! They load real BPF programs: run as root (they skip, saying so, otherwise).

mod util;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use util::{ok, scratch};
use wallclock_stream::units::human_ns;

/// The workload, built once; `stripped`: a copy without its symbol table.
fn workload(stripped: bool) -> PathBuf {
    static W: OnceLock<PathBuf> = OnceLock::new();
    let named = W
        .get_or_init(|| {
            let d = util::root().join("target/test-tmp/wcreport-bin");
            let out = util::build_c("tests/programs/wcreport/own.c", &d, "own");
            let st = Command::new("strip").arg(&out).arg("-o").arg(d.join("own-stripped")).status().expect("strip");
            assert!(st.success(), "strip failed");
            out
        })
        .clone();
    if stripped {
        named.with_file_name("own-stripped")
    } else {
        named
    }
}

fn wait_for(p: &Path, what: &str) {
    let t0 = Instant::now();
    while !p.exists() {
        assert!(t0.elapsed() < Duration::from_secs(60), "{what} never got ready");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn attach(tool: &str, pid: u32, dir: &Path, name: &str) -> Child {
    let ready = dir.join(format!("{name}.ready"));
    let c = Command::new(util::bin(tool))
        .args(["-p", &pid.to_string(), "--ready-file"])
        .arg(&ready)
        .arg("-o")
        .arg(dir.join(format!("{name}.raw")))
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    wait_for(&ready, tool);
    c
}

/// Run the workload for `secs` under the capture tools; returns the merged
/// (or, without `with_on`, symbolized off-CPU) stream's path and the
/// workload's truth: (tid, function, wall ns).
fn capture(name: &str, stripped: bool, secs: &str, with_on: bool) -> (PathBuf, Vec<(u64, String, u64)>) {
    let dir = scratch(name);
    let go = dir.join("go");
    let prog = Command::new(workload(stripped))
        .arg(secs)
        .arg(&go)
        .arg(dir.join("journal.dat"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = prog.id();
    let mut tools = vec![attach("offcputime", pid, &dir, "off")];
    if with_on {
        tools.push(attach("oncputime", pid, &dir, "on"));
    }
    std::fs::write(&go, "").unwrap();
    let out = prog.wait_with_output().unwrap();
    assert!(out.status.success(), "workload failed: {}", out.status);
    for mut t in tools {
        assert!(t.wait().unwrap().success(), "a capture tool failed");
    }
    let sym = |n: &str| {
        let p = dir.join(format!("{n}.sym"));
        std::fs::write(&p, ok("stacksym", &[dir.join(format!("{n}.raw")).to_str().unwrap()], b"")).unwrap();
        p
    };
    let mut stream = sym("off");
    if with_on {
        let on = sym("on");
        let merged = ok("stackmerge", &[stream.to_str().unwrap(), "--on", on.to_str().unwrap()], b"");
        stream = dir.join("merged.stream");
        std::fs::write(&stream, merged).unwrap();
    }
    let truth = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: Vec<&str> = l.split_whitespace().collect();
            (v[0].parse().unwrap(), v[1].to_string(), v[2].parse().unwrap())
        })
        .collect();
    (stream, truth)
}

fn skip() -> bool {
    util::skip_without_root("capture")
}

/// ns of the stream's on/off stacks of `tid` whose innermost frame in the
/// program itself (module `own`) is `func`: the report's "own function".
/// (Holding `func` anywhere is not the same: a sample in a PLT stub called
/// from `func` has `own+0x...` as its innermost own frame.)
fn stream_ns(stream: &str, tid: u64, func: &str) -> u64 {
    util::resolved(stream)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["type"] == "stack" && r["tid"] == tid && r["kind"] != "gpu")
        .filter(|r| {
            r["frames"].as_array().is_some_and(|f| f.iter().rev().find(|f| f["module"] == "own").is_some_and(|f| f["func"] == func))
        })
        .map(|r| r["ns"].as_u64().unwrap())
        .sum()
}

#[test]
fn own_functions_match_the_workloads_truth() {
    if skip() {
        return;
    }
    let (path, truth) = capture("wcreport-capture", false, "2", true);
    let p = path.to_str().unwrap();
    let v: Value = serde_json::from_str(&ok("wcreport", &["--json", "--top", "100", p], b"")).unwrap();
    let txt = ok("wcreport", &["--top", "100", p], b"");
    let stream = std::fs::read_to_string(&path).unwrap();
    for (tid, func, wall) in &truth {
        let t = v["threads"].as_array().unwrap().iter().find(|t| t["tid"] == *tid).expect("thread in report");
        let alive = t["alive_ns"].as_u64().unwrap();
        let f = t["functions"].as_array().unwrap().iter().find(|f| f["func"] == func.as_str());
        let f = f.unwrap_or_else(|| panic!("{func} of {tid} not in the report:\n{txt}"));
        let ns = f["ns"].as_u64().unwrap();
        // The stream's own numbers, summed by function.
        let want = stream_ns(&stream, *tid, func);
        assert!(ns.abs_diff(want) <= 1_000, "{tid} {func}: report {ns} vs stream {want}");
        // Against the workload's own clock: within 4 points of the thread's time.
        let err = ns.abs_diff(*wall) as f64 * 100.0 / alive as f64;
        eprintln!(
            "{tid} {func}: report {} truth {} ({err:.2} points of {})",
            human_ns(ns),
            human_ns(*wall),
            human_ns(alive)
        );
        assert!(err <= 4.0, "{tid} {func}: report {ns} vs truth {wall} ns: {err:.2} points\n{txt}");
        // The text shows the same share, the function first on its line.
        let head = format!("{:.1}%  {}  {func}", ns as f64 * 100.0 / alive as f64, human_ns(ns));
        assert!(txt.lines().any(|l| squeeze(l).starts_with(&squeeze(&head))), "{head}\n{txt}");
    }
    let has = |pat: &str| txt.lines().any(|l| l.contains(pat));
    assert!(has("compute_chunk [on-CPU]"), "{txt}");
    assert!(has("nap → nanosleep → [S] do_nanosleep"), "{txt}");
    assert!(has("wait_for_work → pthread_cond_timedwait64 → [S] futex_wait"), "{txt}");
    // fdatasync's reason is the file system's wait, never the scheduler's plumbing.
    let fsync = txt.lines().find(|l| l.contains("write_journal → fdatasync → [D] ")).unwrap_or_else(|| panic!("{txt}"));
    let reason = fsync.split("[D] ").nth(1).unwrap().trim();
    assert!(
        !reason.is_empty() && !["schedule", "__schedule", "io_schedule", "finish_task_switch"].contains(&reason),
        "{fsync}"
    );
    assert!(!txt.contains(" <- "), "no kernel-first stacks in the text:\n{txt}");
    // The versions the capture's runtime readers read, in its header
    // through stacksym and stackmerge (stream 1.7).
    let header = stream.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find(|r| r["type"] == "header").expect("a header");
    for reader in ["python", "php", "ruby"] {
        let v = header["runtime_versions"][reader].as_array().map_or(0, Vec::len);
        assert!(v > 0, "no {reader} versions in the header: {header}");
    }
}

/// Spaces collapsed, so that column alignment does not matter.
fn squeeze(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn stripped_binary_says_what_to_install() {
    if skip() {
        return;
    }
    let (path, _) = capture("wcreport-stripped", true, "1", false);
    let bin = workload(true);
    let txt = ok("wcreport", &[path.to_str().unwrap()], b"");
    let stream = std::fs::read_to_string(&path).unwrap();
    let id = stream
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["type"] == "maps")
        .flat_map(|r| r["maps"].as_array().cloned().unwrap_or_default())
        .find(|m| m["path"] == bin.to_str().unwrap())
        .and_then(|m| m["build_id"].as_str().map(String::from))
        .expect("the maps record has the binary's build id");
    let line = txt
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{}: ", bin.display())))
        .unwrap_or_else(|| panic!("{txt}"));
    let pct: f64 = line.split(": ").nth(1).unwrap().split('%').next().unwrap().parse().unwrap();
    assert!(pct >= 50.0, "{line}");
    let want = format!(
        "; stripped): build it with -g and keep its symbols, or place the debug file at /usr/lib/debug/.build-id/{}/{}.debug",
        &id[..2],
        &id[2..]
    );
    assert!(line.contains("% of its time unnamed (") && line.ends_with(&want), "{line}\nwant {want}");
    assert!(txt.contains("own-stripped+0x") && txt.contains("(no name)"), "{txt}");
}
