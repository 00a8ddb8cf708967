//! asyncio tasks seen from outside (`scripts/wallclock -- python3
//! workers.py`), as root: tests/programs/asyncio/workers.py runs issue 31's
//! program, 20 tasks looping `await fetch()` (an asyncio.sleep) then
//! `await parse()` (CPU), each timing its own awaits and parsing. The
//! sampled task-time must put the tasks' waits under `worker` -> `fetch`
//! (against the time the tasks measured), `parse` running under `worker`,
//! and the report's TASKS section count them, name them as the program
//! named them, and the ASYNC RUNTIMES line say where the tasks are.
//! Debian's python3.11 (what a fresh machine has), pyenv's 3.12 and
//! 3.13 (a missing pyenv python fails unless WALLCLOCK_SKIP_PYENV=1), and
//! Debian forky's 3.14 and 3.15 in target/chroot-forky (scripts/setup
//! --tests makes it; missing, it fails unless WALLCLOCK_SKIP_CHROOT=1).

mod util;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const SECS: f64 = 5.0;

fn pyenv(minor: u32) -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| "/root".into());
    let mut found: Vec<PathBuf> = std::fs::read_dir(home.join(".pyenv/versions"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&format!("3.{minor}.")))
        .map(|e| e.path().join(format!("bin/python3.{minor}")))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    let p = found.pop();
    if p.is_none() {
        util::missing(&format!("no pyenv python 3.{minor} under ~/.pyenv/versions"), &format!("`pyenv install 3.{minor}` installs it"), "WALLCLOCK_SKIP_PYENV");
    }
    p
}

/// Task-µs of the folded lines that pass `keep(frames, leaf)`.
fn sum(folded: &str, keep: impl Fn(&[&str], &str) -> bool) -> f64 {
    folded
        .lines()
        .filter_map(|l| {
            let (stack, us) = l.rsplit_once(' ')?;
            let frames: Vec<&str> = stack.split(';').collect();
            let (leaf, rest) = frames.split_last()?;
            keep(rest, leaf).then(|| us.parse::<f64>().unwrap())
        })
        .sum()
}

fn at(f: &[&str], i: usize, name: &str) -> bool {
    f.get(i).is_some_and(|f| f.starts_with(&format!("py::{name}:")) && f.ends_with("workers.py"))
}

fn tasks_wait_under_fetch(python: &Path) {
    let tag: String = python.to_string_lossy().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let dir = util::scratch(&format!("tasks_asyncio_{tag}"));
    let truth_file = dir.join("truth.json");
    let mut cmd = vec![python.as_os_str().to_owned(), util::root().join("tests/programs/asyncio/workers.py").into()];
    cmd.extend([SECS.to_string().into(), truth_file.clone().into()]);
    tasks_wait_under_fetch_of(&python.display().to_string(), &dir, &[], &cmd, &truth_file);
}

/// `python3.MINOR` of the forky chroot (scripts/setup --tests makes
/// target/chroot-forky), run inside it by `scripts/chroot run` under
/// `scripts/wallclock --`: the program and its truth in the chroot's /tmp.
fn forkys_tasks_wait_under_fetch(minor: u32) {
    let python = format!("python3.{minor}");
    let root = util::root().join("target/chroot-forky");
    if !root.join("usr/bin").join(&python).exists() {
        util::missing(&format!("no {python} in {}", root.display()), "scripts/setup --tests makes it (scripts/chroot make forky python3.14 python3.15)", "WALLCLOCK_SKIP_CHROOT");
        return;
    }
    let dir = util::scratch(&format!("tasks_asyncio_forky_3{minor}"));
    let inside = format!("/tmp/wc-tasks-3{minor}");
    let there = root.join(&inside[1..]);
    let _ = std::fs::remove_dir_all(&there);
    std::fs::create_dir_all(&there).unwrap();
    std::fs::copy(util::root().join("tests/programs/asyncio/workers.py"), there.join("workers.py")).unwrap();
    let cmd: Vec<std::ffi::OsString> = vec![
        util::root().join("scripts/chroot").into(),
        "run".into(),
        "forky".into(),
        python.clone().into(),
        format!("{inside}/workers.py").into(),
        SECS.to_string().into(),
        format!("{inside}/truth.json").into(),
    ];
    // As it is (no PYTHONPERFSUPPORT): the perf map it would write is in
    // the chroot's /tmp, gone with the process when stacksym runs.
    tasks_wait_under_fetch_of(&python, &dir, &["--no-python-perf"], &cmd, &there.join("truth.json"));
    let _ = std::fs::remove_dir_all(&there);
}

/// `scripts/wallclock WC_ARGS -- CMD...` (the program writes its truth to
/// `truth_file`), checked.
fn tasks_wait_under_fetch_of(python: &str, dir: &Path, wc_args: &[&str], cmd: &[std::ffi::OsString], truth_file: &Path) {
    let prefix = dir.join("a");
    let st = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["-F", "49", "--prefix"])
        .arg(&prefix)
        .args(wc_args)
        .arg("--")
        .args(cmd)
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .status()
        .expect("run scripts/wallclock");
    assert!(st.success(), "scripts/wallclock failed");
    let truth: Value = serde_json::from_str(&std::fs::read_to_string(truth_file).expect("the program's truth.json")).unwrap();
    let fetch_truth = truth["fetch_s"].as_f64().unwrap() * 1e6;
    let parse_cpu = truth["parse_cpu_s"].as_f64().unwrap() * 1e6;
    let folded = std::fs::read_to_string(dir.join("a.tasks.folded")).expect("a.tasks.folded");
    let svg = std::fs::read_to_string(dir.join("a.tasks.svg")).expect("a.tasks.svg");
    assert!(svg.contains("task-time sampled at 49 Hz"), "the task flame graph's title does not say it is sampled");
    assert!(svg.contains("py::fetch"), "the task flame graph has no fetch");

    let suspended = |leaf: &str| leaf != "[running]";
    let under_fetch = sum(&folded, |f, leaf| at(f, 0, "worker") && at(f, 1, "fetch") && suspended(leaf));
    let all_suspended = sum(&folded, |_, leaf| suspended(leaf));
    let slept = sum(&folded, |f, leaf| at(f, 1, "fetch") && leaf == "[sleep]");
    let parse = sum(&folded, |f, leaf| at(f, 0, "worker") && at(f, 1, "parse") && leaf == "[running]");
    let unreadable = sum(&folded, |_, leaf| leaf == "[unreadable]");
    eprintln!(
        "{}: worker -> fetch suspended {:.2} task-s, {:.1}% of all suspended task-time, {:.1}% of the {:.2} task-s the tasks measured in fetch ([sleep] {:.2}); parse running under worker {:.2} task-s (its CPU {:.2} s); unreadable {:.3}",
        python,
        under_fetch / 1e6,
        under_fetch / all_suspended.max(1.0) * 100.0,
        under_fetch / fetch_truth * 100.0,
        fetch_truth / 1e6,
        slept / 1e6,
        parse / 1e6,
        parse_cpu / 1e6,
        unreadable.max(0.0) / 1e6,
    );
    let top: Vec<&str> = folded.lines().take(30).collect();
    assert!(under_fetch >= 0.8 * all_suspended, "under 80% of the suspended task-time is under worker -> fetch\n{}", top.join("\n"));
    // Against the tasks' own clocks (a sample stands for the time since
    // the one before: on a loaded machine a late tick loses none).
    assert!(under_fetch >= 0.8 * fetch_truth && under_fetch <= 1.15 * fetch_truth, "worker -> fetch: {under_fetch} task-us, the tasks measured {fetch_truth}\n{}", top.join("\n"));
    assert!(slept >= 0.3 * under_fetch, "the sleeps are not named [sleep]: {slept} of {under_fetch}\n{}", top.join("\n"));
    // The tasks parse a fifth of the time at most: seen running there.
    assert!(parse > 0.0 && parse >= 0.3 * parse_cpu, "parse running under worker: {parse} task-us, its CPU {parse_cpu} us\n{}", top.join("\n"));

    // The main profile names parse on-CPU under worker too.
    let main = std::fs::read_to_string(dir.join("a.folded")).expect("a.folded");
    assert!(main.lines().any(|l| l.find("py::worker:").is_some_and(|w| l[w..].contains("py::parse:"))), "no parse under worker in a.folded");

    // One process, or (scripts/chroot's mounts before its exec) several.
    let report = ["a_single_thread_analysis.txt", "a_thread_analysis.txt"].iter().find_map(|f| std::fs::read_to_string(dir.join(f)).ok()).expect("the report");
    let section = report.split("\nTASKS (").nth(1).expect("no TASKS section in the report");
    assert!(section.starts_with("asyncio task-seconds sampled at 49 Hz"), "{section}");
    let row = |what: &str| -> Vec<f64> {
        let row = section.lines().find(|l| l.trim_start().starts_with(what)).unwrap_or_else(|| panic!("no {what} row:\n{section}"));
        row.split_whitespace().rev().take(3).map(|v| v.parse().unwrap()).collect()
    };
    // Most tasks asleep at one tick: the 20 workers sleep 50 ms and
    // parse 2 ms a round.
    let s = row("[sleep]");
    assert!((10.0..=20.0).contains(&s[0]), "not 10-20 tasks asleep at most ({s:?}):\n{section}");
    assert!(section.contains("task \"worker-"), "the longest waits do not name the tasks as the program did:\n{section}");
    assert!(report.contains("the process runs Python asyncio: its tasks' waits are in"), "no ASYNC RUNTIMES line saying where the tasks are:\n{report}");
}

#[test]
fn debians_311_tasks_wait_under_fetch() {
    if util::skip_without_root("asyncio task capture") {
        return;
    }
    tasks_wait_under_fetch(Path::new("/usr/bin/python3.11"));
}

#[test]
fn pyenvs_312_tasks_wait_under_fetch() {
    if util::skip_without_root("asyncio task capture") {
        return;
    }
    if let Some(p) = pyenv(12) {
        tasks_wait_under_fetch(&p);
    }
}

#[test]
fn pyenvs_313_tasks_wait_under_fetch() {
    if util::skip_without_root("asyncio task capture") {
        return;
    }
    if let Some(p) = pyenv(13) {
        tasks_wait_under_fetch(&p);
    }
}

/// Debian forky's 3.14 (its C Tasks in per-thread lists) and 3.15, in a
/// chroot, read by what they publish (`_Py_DebugOffsets`, `_AsyncioDebug`).
#[test]
fn forkys_314_tasks_wait_under_fetch() {
    if util::skip_without_root("asyncio task capture") {
        return;
    }
    forkys_tasks_wait_under_fetch(14);
}

#[test]
fn forkys_315_tasks_wait_under_fetch() {
    if util::skip_without_root("asyncio task capture") {
        return;
    }
    forkys_tasks_wait_under_fetch(15);
}

/// Issue 31's part 3 for a runtime whose tasks are not read: a Node
/// program's report says, in its ASYNC RUNTIMES line, that its tasks'
/// waits are not visible and what is; and no task view is written.
#[test]
fn node_says_its_tasks_cannot_be_seen() {
    if util::skip_without_root("Node capture") {
        return;
    }
    let have = Command::new("sh").args(["-c", "command -v node"]).output().is_ok_and(|o| o.status.success());
    if !have && util::missing("node is not installed", "scripts/setup --tests installs nodejs", "WALLCLOCK_SKIP_RUNTIMES") {
        return;
    }
    let dir = util::scratch("tasks_node");
    let prefix = dir.join("n");
    // Timers on the event loop: idle in epoll_wait between them.
    let js = "const t = setInterval(() => { let x = 0; for (let i = 0; i < 1e5; i++) x += i; }, 20); setTimeout(() => clearInterval(t), 2000);";
    let st = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["-F", "49", "--prefix"])
        .arg(&prefix)
        .args(["--", "node", "-e", js])
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .status()
        .expect("run scripts/wallclock");
    assert!(st.success(), "scripts/wallclock failed");
    let report = ["n_thread_analysis.txt", "n_single_thread_analysis.txt"].iter().find_map(|f| std::fs::read_to_string(dir.join(f)).ok()).expect("the report");
    let section = report.split("\nASYNC RUNTIMES\n").nth(1).unwrap_or_else(|| panic!("no ASYNC RUNTIMES section:\n{report}"));
    let line = section.lines().next().unwrap_or_default();
    assert!(line.contains("async runtime (Node)") && line.contains("not visible") && line.contains("idle time"), "{line}");
    assert!(!dir.join("n.tasks.folded").exists(), "a Node program got a task view");
}
