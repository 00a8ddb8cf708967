//! Goroutines seen from outside (`scripts/wallclock -- waiters`), as root:
//! tests/programs/goroutines/waiters.go parks 100 goroutines on a channel
//! receive in main.waiter, 10 in time.Sleep loops in main.napper, and keeps
//! 3 hashing in main.burn on GOMAXPROCS=2, for a time it knows. The sampled
//! goroutine-time must put those waits under those functions with Go's own
//! wait reasons, and the report's GOROUTINES section count them.

mod runtime_common;
mod util;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Kills a process group when dropped before it is disarmed (`None`):
/// after a panic.
struct KillGroup(Option<i32>);

impl Drop for KillGroup {
    fn drop(&mut self) {
        if let Some(g) = self.0 {
            // SAFETY: kill has no memory preconditions; a negative pid names the group.
            unsafe { libc::kill(-g, libc::SIGKILL) };
        }
    }
}

const SECS: f64 = 5.0;

/// The program built under target/ (Go's build cache there too).
fn build(dir: &Path) -> PathBuf {
    let out = dir.join("waiters");
    let cache = util::root().join("target/go-cache");
    let st = Command::new("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg(util::root().join("tests/programs/goroutines/waiters.go"))
        .env("GOCACHE", &cache)
        .env("GOPATH", cache.join("gopath"))
        .env("GO111MODULE", "off")
        .status()
        .expect("go is needed for the goroutine test: run scripts/setup --tests (Debian's golang-go)");
    assert!(st.success(), "building tests/programs/goroutines/waiters.go failed");
    out
}

/// Goroutine-µs of the folded lines that pass `keep(frames, leaf)`.
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

#[test]
fn parked_goroutines_are_under_their_functions_with_their_wait_reasons() {
    if util::skip_without_root("goroutine capture") {
        return;
    }
    let dir = util::scratch("goroutines");
    let prog = build(&dir);
    let prefix = dir.join("g");
    let st = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["-F", "49", "--prefix"])
        .arg(&prefix)
        .args(["--", "env", "GOMAXPROCS=2"])
        .arg(&prog)
        .arg(dir.join("ready"))
        .arg(SECS.to_string())
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .status()
        .expect("run scripts/wallclock");
    assert!(st.success(), "scripts/wallclock failed");
    let folded = std::fs::read_to_string(dir.join("g.goroutines.folded")).expect("g.goroutines.folded");
    let svg = std::fs::read_to_string(dir.join("g.goroutines.svg")).expect("g.goroutines.svg");
    assert!(svg.contains("main.waiter"), "the goroutine flame graph has no main.waiter");
    // A sampled view, and its title says so (issue 31's part 4).
    assert!(svg.contains("goroutine-time sampled at 49 Hz"), "the goroutine flame graph's title does not say it is sampled");
    let root = |f: &[&str]| f.first().is_some_and(|r| r.trim_end_matches(".abi0") == "runtime.goexit");
    let has = |f: &[&str], name: &str| f.contains(&name);

    let waiter = sum(&folded, |f, leaf| root(f) && has(f, "main.waiter") && leaf == "[chan receive]");
    let napper = sum(&folded, |f, leaf| root(f) && has(f, "main.napper") && leaf == "[sleep]");
    let burn_all = sum(&folded, |f, _| has(f, "main.burn"));
    let burn_busy = sum(&folded, |f, leaf| has(f, "main.burn") && ["[running]", "[runnable]", "[preempted]"].contains(&leaf));
    let (want_w, want_n, want_b) = (100.0 * SECS * 1e6, 10.0 * SECS * 1e6, 3.0 * SECS * 1e6);
    eprintln!(
        "main.waiter [chan receive]: {:.1}% of 100 x {SECS} s; main.napper [sleep]: {:.1}% of 10 x {SECS} s; main.burn running/runnable: {:.1}% of its {:.2} goroutine-s ({:.1}% of 3 x {SECS} s)",
        waiter / want_w * 100.0,
        napper / want_n * 100.0,
        burn_busy / burn_all.max(1.0) * 100.0,
        burn_all / 1e6,
        burn_busy / want_b * 100.0,
    );
    let top: Vec<&str> = folded.lines().take(40).collect();
    assert!(waiter >= 0.9 * want_w && waiter <= 1.15 * want_w, "main.waiter's channel receives: {waiter} us of {want_w}\n{}", top.join("\n"));
    assert!(napper >= 0.9 * want_n && napper <= 1.15 * want_n, "main.napper's sleeps: {napper} us of {want_n}\n{}", top.join("\n"));
    assert!(burn_busy >= 0.8 * want_b, "main.burn running or runnable: {burn_busy} us of {want_b}\n{}", top.join("\n"));

    let report = std::fs::read_to_string(dir.join("g_thread_analysis.txt")).expect("the thread analysis report");
    let section = report.split("GOROUTINES").nth(1).expect("no GOROUTINES section in the report");
    // goroutine-s, mean, most (at one tick) of a state or wait reason.
    let row = |what: &str| -> Vec<f64> {
        let row = section.lines().find(|l| l.trim_start().starts_with(what)).unwrap_or_else(|| panic!("no {what} row:\n{section}"));
        row.split_whitespace().rev().take(3).map(|v| v.parse().unwrap()).collect()
    };
    let (w, s) = (row("[chan receive]"), row("[sleep]"));
    assert!(w[0] == 100.0 && (90.0..=101.0).contains(&w[1]), "not 100 goroutines in chan receive (most, mean: {w:?}):\n{section}");
    // The 10 nappers and main.main's own time.Sleep.
    assert!(s[0] == 11.0, "not 11 goroutines asleep at most ({s:?}):\n{section}");
}

/// A net/http server under wrk: each request's handler sleeps 20 ms in
/// main.nap, then waits 20 ms on a channel in main.fetch. Its goroutines'
/// waits must be under the handler, split between the two as the handler
/// splits them.
#[test]
fn a_servers_handlers_wait_under_the_handler() {
    if util::skip_without_root("goroutine capture") {
        return;
    }
    // wrk before anything starts: the server runs until wrk asks it to quit.
    if !runtime_common::have("wrk", "wrk") {
        return;
    }
    let dir = util::scratch("goroutines_server");
    let out = dir.join("sleepy_server");
    let cache = util::root().join("target/go-cache");
    let st = Command::new("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg(util::root().join("tests/programs/goroutines/sleepy_server.go"))
        .env("GOCACHE", &cache)
        .env("GOPATH", cache.join("gopath"))
        .env("GO111MODULE", "off")
        .status()
        .expect("go is needed (scripts/setup --tests)");
    assert!(st.success(), "building sleepy_server.go failed");
    let (portfile, prefix) = (dir.join("port"), dir.join("s"));
    let mut wc = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["-F", "49", "--prefix"])
        .arg(&prefix)
        .arg("--")
        .arg(&out)
        .arg(&portfile)
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .process_group(0)
        .spawn()
        .expect("run scripts/wallclock");
    // A failed assertion below must not leave the server and its capture
    // running (they hold cargo test's output open, and the run never ends).
    let mut group = KillGroup(Some(wc.id() as i32));
    let start = std::time::Instant::now();
    let port: u16 = loop {
        if let Some(p) = std::fs::read_to_string(&portfile).ok().and_then(|s| s.trim().parse().ok()) {
            break p;
        }
        assert!(start.elapsed().as_secs() < 30, "the server did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let url = format!("http://127.0.0.1:{port}/");
    let wrk = Command::new("wrk").args(["-t", "2", "-c", "20", "-d", "3s"]).arg(&url).output().expect("wrk is needed (scripts/setup --tests)");
    assert!(wrk.status.success(), "wrk failed: {}", String::from_utf8_lossy(&wrk.stderr));
    let _ = Command::new("wrk").args(["-t", "1", "-c", "1", "-d", "1s"]).arg(format!("{url}quit")).output();
    let ended = wc.wait().unwrap();
    group.0 = None;
    assert!(ended.success(), "scripts/wallclock failed");
    let folded = std::fs::read_to_string(dir.join("s.goroutines.folded")).expect("s.goroutines.folded");
    let under = |f: &[&str]| f.contains(&"main.handler");
    let handler = sum(&folded, |f, _| under(f));
    let nap = sum(&folded, |f, leaf| under(f) && f.contains(&"main.nap") && leaf == "[sleep]");
    let fetch = sum(&folded, |f, leaf| under(f) && f.contains(&"main.fetch") && leaf == "[chan receive]");
    eprintln!(
        "{}under main.handler: {:.2} goroutine-s; main.nap [sleep] {:.1}%, main.fetch [chan receive] {:.1}%",
        String::from_utf8_lossy(&wrk.stdout),
        handler / 1e6,
        nap / handler.max(1.0) * 100.0,
        fetch / handler.max(1.0) * 100.0
    );
    // 20 connections for 3 s: about 20 handlers waiting at any time.
    assert!(handler >= 20.0 * 1e6, "only {handler} goroutine-us under main.handler:\n{folded}");
    assert!(nap + fetch >= 0.8 * handler, "the handler's waits are not under main.nap/main.fetch:\n{folded}");
    assert!(nap >= 0.3 * handler && fetch >= 0.3 * handler, "the 20 ms sleep and the 20 ms channel wait are not each near half:\n{folded}");
}
