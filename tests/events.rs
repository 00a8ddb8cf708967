//! `oncputime -e EVENT`: stacks sampled on a software event land in the
//! function that causes the event (a program that page-faults in one
//! known function and counts its own pages), the profile counts events
//! and every tool downstream says so; a hardware event on a machine
//! without a PMU is one line naming it. Loads BPF: root (skips otherwise).

mod util;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn faults() -> std::path::PathBuf {
    util::build_c("tests/programs/capture/faults.c", &util::root().join("target/test-tmp/events-bin"), "faults")
}

/// Of folded lines: (weight of the stacks through `func`, of those whose
/// leaf it is, total weight).
fn share(folded: &str, func: &str) -> (u64, u64, u64) {
    let (mut part, mut own, mut all) = (0, 0, 0);
    for l in folded.lines() {
        let (stack, v) = l.rsplit_once(' ').unwrap();
        let v: u64 = v.parse().unwrap();
        all += v;
        let is = |f: &str| f.trim_end_matches("_[c]") == func;
        if stack.split(';').any(is) {
            part += v;
        }
        if stack.rsplit(';').next().is_some_and(is) {
            own += v;
        }
    }
    (part, own, all)
}

#[test]
fn page_faults_land_in_the_faulting_function() {
    if util::skip_without_root("events") {
        return;
    }
    let bin = faults();
    let dir = util::scratch("events-page-faults");
    let raw = dir.join("pf.jsonl");
    let out = Command::new(util::bin("oncputime"))
        .args(["-e", "page-faults", "-o", raw.to_str().unwrap(), "--"])
        .arg(&bin)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout);
    let pages: u64 = said.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("program said {said}"));
    let header: serde_json::Value = serde_json::from_str(std::fs::read_to_string(&raw).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!((header["event"].as_str(), header["event_period"].as_u64()), (Some("page-faults"), Some(100)));
    assert!(header.get("freq_hz").is_none(), "an event profile has no clock frequency: {header}");

    let sym = dir.join("pf.sym");
    util::ok("stacksym", &[raw.to_str().unwrap(), "-o", sym.to_str().unwrap()], b"");
    // stackmerge keeps the counts (no time unit, no scaling to time).
    let folded = util::ok("stackmerge", &[sym.to_str().unwrap(), "--folded"], b"");
    let (part, own, all) = share(&folded, "fault_pages");
    eprintln!("fault_pages: {part} of {all} page faults sampled; the program touched {pages} pages");
    assert!(part * 100 >= all * 90, "fault_pages carries {part} of {all}");
    // Each sample stands for 100 faults: the weights count the program's
    // own faults (plus the loader's and libc's few hundred).
    assert!(part >= pages * 99 / 100 && all <= pages + 5000, "{part}/{all} page faults for {pages} pages touched");

    let report = util::ok("wcreport", &[sym.to_str().unwrap()], b"");
    assert!(report.contains("unit: page-faults"), "{report}");
    // The function's first line counts all under it (`part`); its
    // [on-CPU] line what it ran itself (`own`: a sample may land in a call
    // it makes, the first sysconf can fault in libc's pages). With nothing
    // under a call the report gives the one line, `fault_pages [on-CPU]`.
    let line = |p: &dyn Fn(&str) -> bool| report.lines().find(|l| p(l.trim_end())).unwrap_or_else(|| panic!("{report}"));
    assert!(line(&|l| l.contains("page-faults  fault_pages")).contains(&format!(" {part} page-faults")), "{report}");
    assert!(line(&|l| l.ends_with("fault_pages [on-CPU]")).contains(&format!(" {own} page-faults")), "{report}");
    let svg = util::ok("flame", &[sym.to_str().unwrap()], b"");
    let title = svg.split("<title>").find(|t| t.starts_with("fault_pages (")).expect("a fault_pages frame");
    assert!(title.contains("page-faults"), "the SVG counts page faults: {title}");
    let pb = dir.join("pf.pb.gz");
    util::ok("wcexport", &["--pprof", sym.to_str().unwrap(), "-o", pb.to_str().unwrap()], b"");
    // go tool pprof, the reader people use: the profile's type is the event.
    let top = Command::new("go")
        .args(["tool", "pprof", "-symbolize=none", "-top"])
        .arg(&pb)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("run `go tool pprof` (Debian's golang-go: scripts/setup --tests installs it)");
    let top = String::from_utf8_lossy(&top.stdout);
    assert!(top.contains("Type: page-faults"), "{top}");
    // flat: what the function ran itself; cum: all under it.
    let row = top.lines().find(|l| l.trim_end().ends_with(" fault_pages")).unwrap_or_else(|| panic!("{top}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!((cols.first().copied(), cols.get(3).copied()), (Some(own.to_string().as_str()), Some(part.to_string().as_str())), "flat, cum: {row}");
}

#[test]
fn hardware_event_without_a_pmu_is_one_line() {
    if util::skip_without_root("events") {
        return;
    }
    if Path::new("/sys/bus/event_source/devices/cpu").exists() {
        util::skipped("this machine has a CPU PMU");
        return;
    }
    let dir = util::scratch("events-cycles");
    let marker = dir.join("ran");
    let t = Instant::now();
    let out = Command::new(util::bin("oncputime"))
        .args(["-e", "cycles", "--", "touch", marker.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("{err}");
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("-e cycles") && err.contains("no hardware PMU") && err.contains("page-faults"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(1) && !marker.exists(), "failed before set-up");
}

/// An event profile and a time profile do not add up: stackmerge and
/// flame refuse the mix in one line (streams written by hand: no root).
#[test]
fn counts_and_time_do_not_mix() {
    let dir = util::scratch("events-mix");
    let head = |extra: &str| {
        format!(r#"{{"type":"header","format":"wallclock","version":"1.4","tool":"oncputime","tool_version":"0","clock":"monotonic"{extra}}}"#)
    };
    let stack = r#"{"type":"stack","kind":"on","pid":1,"tid":1,"comm":"a","frames":[{"func":"f"}],"ns":300,"count":3}"#;
    let ev = dir.join("ev.jsonl");
    let time = dir.join("time.jsonl");
    std::fs::write(&ev, format!("{}\n{stack}\n", head(r#","event":"page-faults","event_period":100"#))).unwrap();
    std::fs::write(&time, format!("{}\n{stack}\n", head(r#","freq_hz":49"#))).unwrap();
    for (tool, args) in [("stackmerge", vec![time.to_str().unwrap(), "--on", ev.to_str().unwrap()]), ("flame", vec![ev.to_str().unwrap(), time.to_str().unwrap()])] {
        let out = util::run(tool, &args, b"");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("page-faults") && err.trim().lines().count() == 1, "{tool}: {err}");
    }
    // Alone, its values stay counts: 3 samples of 100 faults.
    let folded = util::ok("stackmerge", &[ev.to_str().unwrap(), "--folded"], b"");
    assert_eq!(folded.trim(), "a (1);f_[c] 300");
    let report = util::ok("wcreport", &[ev.to_str().unwrap()], b"");
    assert!(report.contains("unit: page-faults (an event profile, a sample every 100)"), "{report}");
    assert!(report.contains("300 page-faults  f [on-CPU]"), "{report}");
}
