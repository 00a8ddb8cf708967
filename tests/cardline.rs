//! The project's card, typed as it stands:
//!
//!     oncputime -p PID > on.txt        (raw: nothing symbolizes it)
//!     offcputime -p PID -m 1000 | stacksym | stackmerge --on on.txt | flame > out.svg
//!
//! on a real workload that measures its own CPU time per function
//! (tests/programs/capture/workload.c). The SVG must name the workload's
//! functions under on-CPU time (the raw on.txt, named by stackmerge) and
//! under off-CPU time (named by stacksym), draw no address, root the graph
//! at the process and title it with the pid. Needs root (BPF).

mod util;

use std::process::{Command, Stdio};

use serde_json::Value;

/// `1.23 s`, `630 ms`, `12.0 us`, `900 ns` (units::human_ns) in ns.
fn parse_human(s: &str) -> u64 {
    let (v, u) = s.trim().split_once(' ').unwrap_or_else(|| panic!("time {s:?}"));
    let v: f64 = v.parse().unwrap();
    let scale = match u {
        "s" => 1e9,
        "ms" => 1e6,
        "us" | "µs" => 1e3,
        _ => 1.0,
    };
    (v * scale) as u64
}

/// Boxes of the SVG: (name, fill, title) from each `<g><title>..</title><rect .. fill="..">`.
fn boxes(svg: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for g in svg.split("<g><title>").skip(1) {
        let title = g[..g.find("</title>").unwrap()].to_string();
        let fill = g.split("fill=\"").nth(1).map(|f| f[..f.find('"').unwrap()].to_string()).unwrap_or_default();
        let name = title[..title.rfind(" (").unwrap()].to_string();
        out.push((name, fill, title));
    }
    out
}

/// On-CPU ns of a box: all of it when red (on-CPU only), the `on-CPU T` of
/// a mixed box's tooltip, else 0.
fn on_cpu_ns(fill: &str, title: &str) -> u64 {
    if let Some(i) = title.find("on-CPU ") {
        let rest = &title[i + 7..];
        return parse_human(&rest[..rest.find([',', ')']).unwrap()]);
    }
    let c: Vec<u32> = fill.trim_start_matches("rgb(").trim_end_matches(')').split(',').map(|x| x.parse().unwrap()).collect();
    let total = title[title.rfind(" (").unwrap() + 2..].split(',').next().unwrap();
    if c[0] >= 205 && c[2] <= 55 {
        parse_human(total)
    } else {
        0
    }
}

#[test]
fn card_line_typed_literally_names_on_and_off_cpu_frames() {
    if !util::is_root() {
        eprintln!("SKIPPED: the card's line needs root (BPF)");
        return;
    }
    let dir = util::scratch("cardline");
    let exe = dir.join("workload");
    let src = util::root().join("tests/programs/capture/workload.c");
    let cc = Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(cc.status.success(), "gcc: {}", String::from_utf8_lossy(&cc.stderr));
    let wl = Command::new(&exe).args(["4", dir.to_str().unwrap()]).stdout(Stdio::piped()).spawn().unwrap();
    let pid = wl.id();
    let bin = util::bin_dir();
    let b = |t: &str| bin.join(t).display().to_string();
    // on.txt straight from oncputime (2 s, done well before stackmerge reads
    // it); the card's line itself runs until the workload exits.
    let on = Command::new(b("oncputime"))
        .args(["-p", &pid.to_string(), "-d", "2", "-o", dir.join("on.txt").to_str().unwrap()])
        .spawn()
        .unwrap();
    let line = format!(
        "{} -p {pid} -m 1000 | {} | {} --on on.txt | {} > out.svg",
        b("offcputime"),
        b("stacksym"),
        b("stackmerge"),
        b("flame")
    );
    let card = Command::new("sh").arg("-c").arg(&line).current_dir(&dir).output().unwrap();
    let truth = wl.wait_with_output().unwrap();
    assert!(on.wait_with_output().unwrap().status.success(), "oncputime failed");
    assert!(card.status.success(), "{line}: {}", String::from_utf8_lossy(&card.stderr));
    let raw = std::fs::read_to_string(dir.join("on.txt")).unwrap();
    assert!(raw.contains("\"ustack\"") && !raw.contains("\"frames\""), "on.txt is not raw");

    let svg = std::fs::read_to_string(dir.join("out.svg")).unwrap();
    let bx = boxes(&svg);
    let names: Vec<&str> = bx.iter().map(|b| b.0.as_str()).collect();
    assert!(!names.iter().any(|n| n.starts_with("0x") || n.contains("workload+0x")), "addresses drawn: {names:?}");
    // The root names the process; the title its pid.
    let root = format!("workload ({pid})");
    assert!(svg.contains(&format!(">{root}</text>")), "no root {root:?}");
    let title = svg.split("<text id=\"title\"").nth(1).unwrap();
    assert!(title[..title.find("</text>").unwrap()].contains(&format!("(pid {pid})")), "title: {title:.200}");

    // Ground truth: the CPU time each function measured for itself.
    let truth: Value = serde_json::from_slice(&truth.stdout).unwrap();
    let measured = |func: &str| -> u64 {
        truth["threads"].as_array().unwrap().iter().filter_map(|t| t["funcs"][func]["cpu_ns"].as_u64()).sum()
    };
    let on_under = |func: &str| -> u64 { bx.iter().filter(|b| b.0 == func).map(|b| on_cpu_ns(&b.1, &b.2)).sum() };
    // On-CPU (from the raw on.txt): the spinning threads' CPU time sits
    // under `spin`, named. offcputime attaches a few 100 ms after the
    // start and the window is clipped there: at least half of the truth.
    let (spin_cpu, spin_on) = (measured("spin"), on_under("spin"));
    eprintln!("spin: measured {spin_cpu} ns CPU, on-CPU under `spin` in the SVG {spin_on} ns");
    assert!(spin_on * 2 >= spin_cpu && spin_on <= spin_cpu * 11 / 10, "spin on-CPU {spin_on} vs measured {spin_cpu}");
    assert!(on_under("compute") > 0, "no on-CPU time under compute");
    // Off-CPU (through stacksym): the sleepers, blue, named.
    for f in ["long_sleep", "wait_cond"] {
        let b = bx.iter().find(|b| b.0 == f).unwrap_or_else(|| panic!("no {f} in {names:?}"));
        let c: Vec<u32> = b.1.trim_start_matches("rgb(").trim_end_matches(')').split(',').map(|x| x.parse().unwrap()).collect();
        assert!(c[0] == c[1] && c[2] >= 190, "{f} is not off-CPU blue: {}", b.1);
        assert!(parse_human(b.2[b.2.rfind(" (").unwrap() + 2..].split(',').next().unwrap()) >= 2_000_000_000, "{}", b.2);
    }
}
