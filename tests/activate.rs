//! `--prepare` / `--activate`: the window opens when asked (timed by the
//! test's own clocks, from before the tool was launched), -d counts from
//! it, nothing before it is recorded, and a bad schedule fails before
//! anything is set up. Loads BPF: run as root (skips otherwise).

mod util;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;
use wallclock_capture::target::monotonic_ns;
use wallclock_capture::when::realtime_ns;

const MS: i64 = 1_000_000;

fn header(path: &Path) -> Value {
    let s = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(s.lines().next().unwrap()).unwrap()
}

fn capture(tool: &str, args: &[&str]) -> (u64, Output) {
    let t0 = monotonic_ns();
    let out = Command::new(util::bin(tool)).args(args).output().unwrap();
    assert!(out.status.success(), "{tool} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    (t0, out)
}

/// The CPU clock of process `pid` (clock_getcpuclockid).
fn cpu_clock(pid: u32) -> libc::clockid_t {
    let mut c: libc::clockid_t = 0;
    // SAFETY: c is a valid clockid_t to write.
    let r = unsafe { libc::clock_getcpuclockid(pid as libc::pid_t, &mut c) };
    assert_eq!(r, 0, "clock_getcpuclockid({pid})");
    c
}

fn clock_ns(c: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec.
    unsafe { libc::clock_gettime(c, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A process to capture by pid (a launched command's window would begin
/// at its exec, after the activation released it).
struct Sleeper(std::process::Child);

impl Sleeper {
    fn new() -> Sleeper {
        Sleeper(Command::new("sleep").arg("30").spawn().unwrap())
    }
    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Its window opens 2 s after the launch, lasts -d from there, and the
/// tool said what it waited for. The launch is the test's own clock read
/// before the spawn, given as `--launched-at` (as scripts/wallclock gives
/// its captures theirs): counted from the tool's own start, the time its
/// exec and loader took on a loaded machine (77 ms once in CI, with the
/// other tests of this file loading BPF programs beside it) would be
/// taken for the wait's error.
#[test]
fn activate_after_a_delay() {
    if util::skip_without_root("activate") {
        return;
    }
    let dir = util::scratch("activate-delay");
    let target = Sleeper::new();
    for tool in ["offcputime", "oncputime"] {
        let f = dir.join(format!("{tool}.jsonl"));
        let at = realtime_ns().to_string();
        let (t0, out) = capture(tool, &["--activate", "+2s", "--launched-at", &at, "-d", "1", "-o", f.to_str().unwrap(), "-p", &target.pid()]);
        let h = header(&f);
        let (start, end) = (h["start_ns"].as_u64().unwrap(), h["end_ns"].as_u64().unwrap());
        let late = start as i64 - t0 as i64 - 2000 * MS;
        eprintln!("{tool}: window opened {:.2} ms after launch + 2 s, lasted {:.2} ms", late as f64 / 1e6, (end - start) as f64 / 1e6);
        // The window opens at the instant itself (written into the BPF
        // side before it comes), so only the clocks' conversion between
        // realtime and monotonic, the tool's and the test's, is between
        // them: nanoseconds to microseconds, either way (-684 ns once).
        assert!((-MS..20 * MS).contains(&late), "{tool}: window opened {late} ns off launch + 2 s; it said {}", String::from_utf8_lossy(&out.stderr));
        assert!((1000 * MS..1100 * MS).contains(&((end - start) as i64)), "{tool}: -d 1 lasted {} ns from the activation", end - start);
        assert_eq!(h["activate"], "+2s");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("waiting for activation"), "{tool} said {err}");
    }
}

/// `/5s`: the window opens on a whole multiple of 5 s of the realtime
/// clock (converted from the header's monotonic start with the test's own
/// pair of clock readings). The capture is launched at least 2 s before
/// the boundary: launched 50 ms before one, its preparation (loading the
/// BPF programs beside this file's other tests) took past it, and the
/// window opened 143 ms late, as the tool said it would.
#[test]
fn activate_on_an_epoch_boundary() {
    if util::skip_without_root("activate") {
        return;
    }
    let dir = util::scratch("activate-aligned");
    let f = dir.join("on.jsonl");
    let target = Sleeper::new();
    let to_boundary = 5000 * MS - (realtime_ns() as i64).rem_euclid(5000 * MS);
    if to_boundary < 2000 * MS {
        std::thread::sleep(Duration::from_nanos(to_boundary as u64 + 10 * MS as u64));
    }
    let (_, out) = capture("oncputime", &["--activate", "/5s", "-d", "0.2", "-o", f.to_str().unwrap(), "-p", &target.pid()]);
    let h = header(&f);
    let offset = realtime_ns() as i64 - monotonic_ns() as i64;
    let real = h["start_ns"].as_u64().unwrap() as i64 + offset;
    // Signed: the window opens at the boundary itself, and the test's
    // conversion of its start to realtime may put it nanoseconds before
    // (-37 ns once).
    let past = (real + 2500 * MS).rem_euclid(5000 * MS) - 2500 * MS;
    eprintln!("window opened {:.4} ms after a 5 s boundary", past as f64 / 1e6);
    assert!((-MS..20 * MS).contains(&past), "window opened {past} ns after a 5 s boundary; it said {}", String::from_utf8_lossy(&out.stderr));
    let theirs = h["start_realtime_ns"].as_i64().unwrap();
    assert!((theirs - real).abs() < MS, "header start_realtime_ns {theirs} vs {real}");
}

/// A held `-- COMMAND` runs from the activation, not before: it prints
/// the realtime clock as its first act.
#[test]
fn held_command_runs_at_activation() {
    if util::skip_without_root("activate") {
        return;
    }
    let dir = util::scratch("activate-held");
    for tool in ["offcputime", "oncputime"] {
        let f = dir.join(format!("{tool}.jsonl"));
        let (_, out) = capture(tool, &["--activate", "+1s", "-o", f.to_str().unwrap(), "--", "date", "+%s%N"]);
        let ran: i64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        let at = header(&f)["start_realtime_ns"].as_i64().unwrap();
        eprintln!("{tool}: the command ran {:.2} ms after the activation", (ran - at) as f64 / 1e6);
        assert!((0..500 * MS).contains(&(ran - at)), "{tool}: the command ran {} ns from the activation", ran - at);
    }
}

/// A process spinning through the preparation: only the activated second
/// is recorded (exact on-CPU time and samples of that second, not three).
/// The spinner's CPU clock is read every millisecond through the capture
/// (its share of a loaded machine changes from one second to the next:
/// the second recorded once held 73% of its CPU time of the three).
#[test]
fn nothing_before_activation() {
    if util::skip_without_root("activate") {
        return;
    }
    // Niced: the timing tests beside it must not wait behind it for a CPU.
    let mut spin = Command::new("nice").args(["-n", "19", "sh", "-c", "while :; do :; done"]).spawn().unwrap();
    let pid = spin.id().to_string();
    let dir = util::scratch("activate-nothing-before");
    let f = dir.join("on.jsonl");
    let clock = cpu_clock(spin.id());
    // (monotonic before, its CPU clock, monotonic after)
    let reader = util::poll(Duration::from_millis(1), move || {
        let a = monotonic_ns();
        let c = clock_ns(clock);
        (a, c, monotonic_ns())
    });
    let (t0, out) =
        capture("oncputime", &["--exact", "--prepare", "@now", "--activate", "+2s", "-d", "1", "-p", &pid, "-o", f.to_str().unwrap()]);
    let reads = reader.finish();
    let _ = spin.kill();
    let _ = spin.wait();
    let s = std::fs::read_to_string(&f).unwrap();
    let recs: Vec<Value> = s.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let h = &recs[0];
    let (start, end) = (h["start_ns"].as_u64().unwrap(), h["end_ns"].as_u64().unwrap());
    // The tool's launch is its clock at its start less the time it ran
    // and waited since its fork: never before the spawn (CI once saw the
    // window open before this clock + 2 s, when the tool read its clock
    // before that time: tools/capture/src/realtime.rs).
    let late = start as i64 - t0 as i64 - 2000 * MS;
    eprintln!("window opened {:.2} ms after the test's clock before the spawn + 2 s", late as f64 / 1e6);
    assert!(late >= 0, "window opened {late} ns off the spawn + 2 s; it said {}", String::from_utf8_lossy(&out.stderr));
    let th = recs.iter().find(|r| r["type"] == "thread" && r["tid"].as_u64() == pid.parse().ok()).expect("the spinning thread");
    let (on, samples) = (th["on_ns"].as_u64().unwrap(), th["samples"].as_u64().unwrap());
    let steal = th["steal_ns"].as_u64().unwrap_or(0);
    // The CPU it ran in the window, bounded by the reads around its edges:
    // at least from the first read after the start to the last before the
    // end, at most from the last read before the start to the first after
    // the end.
    let before = |t: u64| reads.iter().rev().find(|r| r.2 <= t).map(|r| r.1);
    let after = |t: u64| reads.iter().find(|r| r.0 >= t).map(|r| r.1);
    let (Some(s0), Some(s1), Some(e0), Some(e1)) = (before(start), after(start), before(end), after(end)) else {
        panic!("the spinner's clock was not read around the window ({} reads)", reads.len())
    };
    let (lo, hi) = (e0.saturating_sub(s1), e1 - s0);
    eprintln!("on_ns {on} (steal {steal}); by its own clock it ran {lo}..{hi} ns of the window; samples {samples}; stderr: {}", String::from_utf8_lossy(&out.stderr));
    // Its on-CPU time less its steal is what its clock counts. A thread
    // alone on a CPU may never be switched in the window: its steal (the
    // interrupt time its clock leaves out: 4-8 ms a second here) then
    // comes from /proc readings at the start and the stop, as old as the
    // last scheduler tick, and is taken less that tick (10 ms: see
    // tools/capture/src/steal.rs), so on-CPU less steal may exceed the
    // clock by up to that much. The test's own reads of a running
    // process's clock are as old as its last tick too (the kernel brings
    // another process's clock up to date only at ticks and switches): a
    // spinner alone on a CPU read 1,003.3 ms over a window of 1,000.7 ms
    // between reads around its edges; so the lower bound is a tick less.
    let tick = 10 * MS as u64;
    let ran = on - steal.min(on);
    assert!(on + tick >= lo && ran <= hi + tick, "on-CPU time of the activated second only: {on} ns (steal {steal}), its own clock says {lo}..{hi} ns");
    assert!(on > 0, "the activated second was recorded");
    // Sampled too, when it ran enough of that second to be: niced behind
    // two CPU hogs it ran 13 ms of it (0.65 samples due at 49 Hz).
    let due = on * 49 / 1_000_000_000;
    assert!(samples > 0 || due < 5, "the activated second was sampled: {samples} samples, {due} due");
    assert!(samples <= due + 5, "samples of that second at 49 Hz: {samples}");
}

/// A time in the past, an activation before the preparation, a spec that
/// is no time: one line, at once, and the command never started.
#[test]
fn bad_schedules_fail_before_set_up() {
    let dir = util::scratch("activate-bad");
    let marker = dir.join("ran");
    let touch = format!("touch {}", marker.display());
    for (when, says) in [
        (vec!["--activate", "@2001-01-01T00:00:00"], "in the past"),
        (vec!["--prepare", "@00:00:00", "--activate", "@now"], "--prepare @00:00:00"),
        (vec!["--prepare", "+5s", "--activate", "+2s"], "before --prepare +5s"),
        (vec!["--activate", "soon"], "unknown time"),
    ] {
        for tool in ["offcputime", "oncputime"] {
            let t = Instant::now();
            let out = Command::new(util::bin(tool)).args(&when).args(["-d", "1", "--", "sh", "-c", &touch]).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{tool} {when:?} succeeded");
            assert!(err.contains(says), "{tool} {when:?}: {err}");
            assert!(err.trim().lines().count() <= 3, "{tool} {when:?}: a short error: {err}");
            assert!(t.elapsed() < Duration::from_millis(500), "{tool} {when:?} took {:?}", t.elapsed());
            std::thread::sleep(Duration::from_millis(50));
            assert!(!marker.exists(), "{tool} {when:?} started the command");
        }
    }
}

/// scripts/wallclock gives both captures its own launch: its merged
/// stream's window opens 2 s after the launch and lasts -d. Given the
/// launch (WALLCLOCK_LAUNCHED: the test's own clock), the window opens
/// within 20 ms of it + 2 s; left to itself, the launch is the script's
/// start, which the test cannot time (how long bash takes to start is the
/// machine's: a stamp taken by a `date` process, as before, was 58 ms
/// late at load 40), so only its side is bounded.
#[test]
fn wallclock_script_activates_both_captures() {
    if util::skip_without_root("activate") {
        return;
    }
    let target = Sleeper::new();
    for given in [true, false] {
        let dir = util::scratch(if given { "activate-script-given" } else { "activate-script" });
        let prefix = dir.join("p");
        let (t0, r0) = (monotonic_ns(), realtime_ns());
        let mut cmd = Command::new("bash");
        cmd.arg(util::root().join("scripts/wallclock"))
            .args(["--activate", "+2s", "-d", "1", "--prefix", prefix.to_str().unwrap(), &target.pid()])
            .env("WALLCLOCK_BIN_DIR", util::bin_dir());
        if given {
            cmd.env("WALLCLOCK_LAUNCHED", r0.to_string());
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let h = header(&dir.join("p.stream"));
        let (start, end) = (h["start_ns"].as_u64().unwrap(), h["end_ns"].as_u64().unwrap());
        let late = if given {
            h["start_realtime_ns"].as_i64().unwrap() - r0 as i64 - 2000 * MS
        } else {
            start as i64 - t0 as i64 - 2000 * MS
        };
        eprintln!("merged window opened {:.2} ms after launch + 2 s (launch given: {given}), lasted {:.2} ms", late as f64 / 1e6, (end - start) as f64 / 1e6);
        let bound = if given { 20 * MS } else { 1000 * MS };
        // (At the instant itself: the conversions of the clocks may put
        // it a hair before, as above.)
        assert!((-MS..bound).contains(&late), "window opened {late} ns off launch + 2 s (launch given: {given})");
        assert!(((end - start) as i64 - 1000 * MS).abs() <= 20 * MS, "-d 1 from the activation: {} ns", end - start);
        assert_eq!(h["activate"], "+2s");
    }
}
