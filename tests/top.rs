//! `wctop` (`wallclock top`) on the states program
//! (tests/programs/dump/states.c): `-n 3` to a pipe writes three plain
//! tables whose on-CPU shares agree with each thread's own CPU clock over
//! each interval (ON% is the time it ran, as its clock counts it; the
//! steal a busy host takes is STEAL%: counted in ON%, a spinner's share
//! was 5-20 points over its clock here and in CI), with every thread's state and blocking function; in a
//! terminal (tmux), `q` and Ctrl-C quit and leave the terminal as it was.
//! Loads real BPF programs: run as root.

mod util;

#[path = "programs/dump/states.rs"]
mod states;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use states::{States, FUNCS};

fn program() -> PathBuf {
    util::build_c("tests/programs/dump/states.c", &util::root().join("target/test-tmp/top-bin"), "states")
}

/// One table of wctop's: its interval (monotonic ns) and per thread id
/// (ON%, STEAL%, RUNQ%, SLEEP%, DISK%, blocked-in function).
struct Table {
    start: u64,
    end: u64,
    rows: Vec<(u32, [f64; 5], String)>,
}

fn parse(text: &str) -> Vec<Table> {
    let mut tables = Vec::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let mut lines = block.lines();
        let head = lines.next().unwrap();
        assert!(head.starts_with("wallclock top: pid "), "not a table: {block}");
        let span = head.split(" s, ").nth(1).and_then(|r| r.split(" s monotonic").next()).unwrap_or_else(|| panic!("no interval in {head}"));
        let (a, b) = span.split_once('-').unwrap();
        let ns = |s: &str| (s.parse::<f64>().unwrap() * 1e9).round() as u64;
        assert!(lines.next().unwrap().trim_start().starts_with("TID NAME"), "{block}");
        let rows = lines
            .map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                let p = |i: usize| w[i].parse::<f64>().unwrap_or_else(|_| panic!("{l}"));
                (w[0].parse().unwrap(), [p(2), p(3), p(4), p(5), p(6)], w[8].to_string())
            })
            .collect();
        tables.push(Table { start: ns(a), end: ns(b), rows });
    }
    tables
}

#[test]
fn three_tables_to_a_pipe_agree_with_each_threads_cpu_clock() {
    if util::skip_without_root("wctop") {
        return;
    }
    let dir = util::scratch("top-pipe");
    let s = States::start(&program(), &dir, 0);
    let out = Command::new(util::bin("wctop")).args([&s.pid.to_string(), "-n", "3"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "wctop failed: {}", String::from_utf8_lossy(&out.stderr));
    let tables = parse(&text);
    assert_eq!(tables.len(), 3, "{text}");
    // The last table's end must lie before the states' last report.
    let t = Instant::now();
    while s.last_report() <= tables[2].end && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The intervals tile the capture (offcputime's --every windows).
    for w in tables.windows(2) {
        assert_eq!(w[0].end, w[1].start, "the intervals do not tile:\n{text}");
    }
    let (start, end) = (tables[0].start, tables[2].end);
    let secs = (end - start) as f64 / 1e9;
    let (a, b) = (s.cpu_bounds(start), s.cpu_bounds(end));
    for (name, func) in FUNCS {
        let tid = s.tids[name];
        // Shares weighed by each interval's length: the thread's time over
        // the three intervals.
        let mut sum = [0.0; 5];
        for (i, tb) in tables.iter().enumerate() {
            let (_, share, blocked) = tb.rows.iter().find(|r| r.0 == tid).unwrap_or_else(|| panic!("{name} not in table {i}:\n{text}"));
            let len = (tb.end - tb.start) as f64 / 1e9;
            for k in 0..5 {
                sum[k] += share[k] * len / secs;
            }
            // Each interval too: its own clock's share between the
            // reports around the interval's ends, and the shares whole.
            let (a, b) = (s.cpu_bounds(tb.start), s.cpu_bounds(tb.end));
            let lo = (b[name].0.saturating_sub(a[name].1)) as f64 / 1e7 / len;
            let hi = (b[name].1 - a[name].0) as f64 / 1e7 / len;
            assert!(share[0] > lo - 5.0 && share[0] < hi + 5.0, "table {i}: {name} on-CPU {:.1}%, its clock {lo:.1}..{hi:.1}%:\n{text}", share[0]);
            eprintln!("table {i} {name}: on {:.1}% (steal {:.1}%), own clock {lo:.1}..{hi:.1}%", share[0], share[1]);
            let total: f64 = share.iter().sum();
            // A block that ends while the capture reads the kernel's sums
            // is counted whole in that window (a preemption there, on a
            // loaded machine, is milliseconds): 5 points, as for on-CPU.
            assert!((total - 100.0).abs() < 5.0, "table {i}: {name}'s shares add to {total:.1}:\n{text}");
            match name {
                "sleeper" | "holder" | "waiter" => {
                    assert!(share[3] > 99.0, "table {i}: {name} sleeps {:.1}%:\n{text}", share[3]);
                    assert_eq!(blocked, func, "table {i}: {name} blocked in {blocked}:\n{text}");
                }
                "spin1" | "spin2" => assert!(share[3] + share[4] < 1.0, "table {i}: {name} blocked:\n{text}"),
                _ => {}
            }
        }
        // Its own clock's share of the three intervals, between the
        // reports around each end.
        let lo = (b[name].0.saturating_sub(a[name].1)) as f64 / 1e7 / secs;
        let hi = (b[name].1 - a[name].0) as f64 / 1e7 / secs;
        eprintln!("{name}: on {:.1}%, own clock {lo:.1}..{hi:.1}%", sum[0]);
        assert!(sum[0] > lo - 5.0 && sum[0] < hi + 5.0, "{name} on-CPU {:.1}% over the 3 intervals, its clock {lo:.1}..{hi:.1}%:\n{text}", sum[0]);
        let total: f64 = sum.iter().sum();
        assert!((total - 100.0).abs() < 2.0, "{name}'s shares over the 3 intervals add to {total:.1}:\n{text}");
    }
    let syncer = tables.iter().flat_map(|t| &t.rows).filter(|r| r.0 == s.tids["syncer"] && r.1[4] > 0.0);
    assert!(syncer.clone().any(|r| r.2 == "sync_loop"), "the syncer was never blocked in sync_loop:\n{text}");
}

/// A tmux server of our own, killed when dropped.
struct Tmux(String);

impl Tmux {
    fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new("tmux").arg("-L").arg(&self.0).args(args).env("TERM", "xterm-256color").output().expect("tmux");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn wait_for(&self, what: &str, pred: impl Fn(&Tmux) -> bool) {
        let t = Instant::now();
        while !pred(self) {
            assert!(t.elapsed() < Duration::from_secs(30), "timed out waiting for {what}: screen\n{}", self.cmd(&["capture-pane", "-p"]));
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.cmd(&["kill-server"]);
    }
}

#[test]
fn q_and_ctrl_c_quit_and_restore_the_terminal() {
    if util::skip_without_root("wctop") {
        return;
    }
    let dir = util::scratch("top-tmux");
    let s = States::start(&program(), &dir, 0);
    let tmux = Tmux(format!("wctop-test-{}", std::process::id()));
    let wctop = util::bin("wctop");
    for (key, n) in [("q", 1), ("C-c", 2)] {
        let (before, after, done) = (dir.join(format!("before{n}")), dir.join(format!("after{n}")), dir.join(format!("done{n}")));
        let script = format!(
            "stty -a > {b}; {w} {p}; echo $? > {d}; stty -a > {a}; sleep 60",
            b = before.display(),
            w = wctop.display(),
            p = s.pid,
            d = done.display(),
            a = after.display()
        );
        tmux.cmd(&["new-session", "-d", "-s", &format!("t{n}"), "-x", "120", "-y", "40", &script]);
        let target = format!("t{n}");
        tmux.wait_for("the first table", |t| t.cmd(&["capture-pane", "-p", "-t", &target]).contains("BLOCKED IN"));
        assert_eq!(tmux.cmd(&["display", "-p", "-t", &target, "#{alternate_on}"]).trim(), "1", "wctop is not on the alternate screen");
        let screen = tmux.cmd(&["capture-pane", "-p", "-t", &target]);
        assert!(screen.contains("sleep_forever"), "{screen}");
        // A key re-sorts the table at once.
        tmux.cmd(&["send-keys", "-t", &target, "d"]);
        tmux.wait_for("the table sorted by disk", |t| t.cmd(&["capture-pane", "-p", "-t", &target]).contains(", by disk"));
        let screen = tmux.cmd(&["capture-pane", "-p", "-t", &target]);
        let disk: Vec<f64> = screen.lines().skip(2).take(7).map(|l| l.split_whitespace().nth(6).and_then(|v| v.parse().ok()).unwrap_or(-1.0)).collect();
        assert!(disk.len() == 7 && disk.windows(2).all(|w| w[0] >= w[1]) && disk[6] >= 0.0, "not sorted by DISK%:\n{screen}");
        tmux.cmd(&["send-keys", "-t", &target, key]);
        tmux.wait_for("wctop to quit", |_| after.exists());
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(std::fs::read_to_string(&done).unwrap().trim(), "0", "wctop's exit status after {key}");
        assert_eq!(std::fs::read_to_string(&before).unwrap(), std::fs::read_to_string(&after).unwrap(), "stty -a differs after {key}");
        assert_eq!(tmux.cmd(&["display", "-p", "-t", &target, "#{alternate_on}"]).trim(), "0", "the alternate screen was not left after {key}");
        // Its capture stopped with it.
        let pid = s.pid.to_string();
        let capture = std::fs::read_dir("/proc").unwrap().filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok()).find(|c| {
            let args: Vec<&[u8]> = c.split(|&b| b == 0).collect();
            args.first().is_some_and(|a| a.ends_with(b"/offcputime")) && args.contains(&pid.as_bytes())
        });
        assert!(capture.is_none(), "offcputime still runs after {key}");
    }
}
