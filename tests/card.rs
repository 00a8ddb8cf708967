//! The project's card line, typed as a user types it:
//!
//!     oncputime -p PID > on.txt
//!     offcputime -p PID -m 1000 | stacksym | stackmerge --on on.txt | flame > out.svg
//!
//! `on.txt` is raw (unsymbolized) oncputime output. The SVG must name the
//! workload's functions in both colours, and a real browser (headless
//! chromium, installed by `scripts/setup --tests`) must render it so.

mod util;

use std::path::Path;
use std::process::{Command, Stdio};

fn sh(dir: &Path, script: &str) {
    let path = format!("{}:{}", util::bin_dir().display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new("bash").arg("-c").arg(script).current_dir(dir).env("PATH", path).output().unwrap();
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    eprintln!("$ {script}\n{}", String::from_utf8_lossy(&out.stderr));
}

/// Titles of the SVG's frames (`<title>NAME (N us, P%)</title>`), with
/// the fill of the rectangle drawn for each.
fn frames(svg: &str) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for g in svg.split("<g>").skip(1) {
        let Some(t) = g.split("<title>").nth(1).and_then(|t| t.split("</title>").next()) else { continue };
        let name = t.rsplit_once(" (").map_or(t, |(n, _)| n).to_string();
        let fill = g.split("fill=\"").nth(1).and_then(|f| f.split('"').next()).unwrap_or("").to_string();
        v.push((name, fill));
    }
    v
}

/// (red, green, blue) of an `rgb(r,g,b)` fill.
fn rgb(fill: &str) -> Option<(u8, u8, u8)> {
    let inner = fill.strip_prefix("rgb(")?.strip_suffix(')')?;
    let mut it = inner.split(',').map(|c| c.trim().parse::<u8>().ok());
    Some((it.next()??, it.next()??, it.next()??))
}

fn warm((r, g, b): (u8, u8, u8)) -> bool {
    r > 150 && r as u16 > b as u16 + 60 && g < 230
}

fn blue((r, _g, b): (u8, u8, u8)) -> bool {
    b > 150 && b as u16 > r as u16 + 60
}

#[test]
fn card_line_typed_literally_names_both_kinds() {
    if util::skip_without_root("card") {
        return;
    }
    let dir = util::scratch("card");
    let wl = util::build_demo(&dir);
    let mut target = Command::new(&wl).arg("8").arg(dir.join("scratch.dat")).stdout(Stdio::null()).spawn().unwrap();
    let pid = target.id();
    sh(&dir, &format!("oncputime -p {pid} -d 2 > on.txt"));
    sh(&dir, &format!("offcputime -p {pid} -m 1000 -d 2 | stacksym | stackmerge --on on.txt | flame > out.svg"));
    let _ = target.kill();
    let _ = target.wait();

    let svg = std::fs::read_to_string(dir.join("out.svg")).unwrap();
    let fr = frames(&svg);
    // On-CPU work: a box drawn warm (all on-CPU), or a mixed box whose
    // tooltip gives its on-CPU part (`on-CPU 708 ms, off-CPU 723 ms`,
    // drawn in the colour of the larger part). Off-CPU waits: drawn blue.
    for f in ["compute_chunk", "handle_item"] {
        let on = fr.iter().any(|(n, c)| n == f && rgb(c).is_some_and(warm))
            || svg.split("<title>").any(|t| t.starts_with(&format!("{f} (")) && t.split("</title>").next().is_some_and(|t| t.contains("on-CPU ") && !t.contains("on-CPU 0 ")));
        assert!(on, "{f}: no on-CPU time in the graph");
    }
    // (Not wait_for_item: on a loaded machine the consumer is always
    // behind and never waits for an item; its wait is then runnable time
    // under handle_item.)
    for f in ["nap", "write_and_fsync"] {
        assert!(fr.iter().any(|(n, c)| n.contains(f) && rgb(c).is_some_and(blue)), "{f}: no blue (off-CPU) frame");
    }
    let hex: Vec<&String> = fr.iter().map(|(n, _)| n).filter(|n| n.starts_with("0x") || n.contains("workload+0x")).collect();
    assert!(hex.is_empty(), "frames left as addresses: {:?}", &hex[..hex.len().min(10)]);
    // The root names the process, the title its pid and window.
    let root = format!("workload ({pid})");
    assert!(fr.iter().any(|(n, _)| *n == root), "no root box {root:?}");
    let title = svg.split("<text id=\"title\"").nth(1).and_then(|t| t.split("</text>").next()).unwrap_or("");
    assert!(title.contains(&format!("(pid {pid})")) && title.contains("window"), "title: {title}");

    // A real browser: the graph's script runs and both colours reach the screen.
    let shot = util::browser::screenshot(&dir.join("out.svg"), &dir);
    let total = shot.width * shot.height;
    let (n_warm, n_blue) = (shot.count(warm), shot.count(blue));
    eprintln!("screenshot: {:.1}% warm, {:.1}% blue pixels", 100.0 * n_warm as f64 / total as f64, 100.0 * n_blue as f64 / total as f64);
    // On-CPU boxes are narrow when the machine is loaded (the workload's
    // compute waits runnable, in blue): a few thousand warm pixels still
    // say the browser draws them in their colour.
    assert!(n_warm * 500 >= total, "the browser shows almost no on-CPU (warm) frames");
    assert!(n_blue * 100 >= total, "the browser shows almost no off-CPU (blue) frames");
}
