//! A real Rust program, built by rustc as users build theirs, profiled
//! live. rustc's default linker (lld, since Rust 1.90) packs the segments
//! without page alignment: the text begins in the last page of the
//! read-only segment, and an unwinder that took the first segment holding
//! the mapping's offset put every frame one page off (the stacks of every
//! Rust program ended in `[unknown]` after the leaf function).

mod util;

use serde_json::Value;
use std::process::Command;

/// Every off-CPU stack of the program's thread, from `_start` through
/// `main::main` to the function that slept, as the program spent its time:
/// half under `stage::<[u8; 8]>` → `inner`, half in the closure `stage`
/// returned.
#[test]
fn rust_program_stacks_unwind_to_start() {
    if util::skip_without_root("offcputime needs root") {
        return;
    }
    let dir = util::scratch("rust-live");
    let bin = util::build_rustnames(&dir);
    let raw = dir.join("off.stream");
    let out = Command::new(util::bin("offcputime")).arg("-o").arg(&raw).arg("--").arg(&bin).arg("1").output().unwrap();
    assert!(out.status.success(), "offcputime: {}", String::from_utf8_lossy(&out.stderr));
    let named = util::ok("stacksym", &[], &std::fs::read(&raw).unwrap());
    let (mut total, mut rooted, mut inner, mut closure) = (0u64, 0u64, 0u64, 0u64);
    let mut example = String::new();
    for r in util::resolved(&named).lines().map(|l| serde_json::from_str::<Value>(l).unwrap()) {
        if r["type"] != "stack" || r["kind"] != "off" {
            continue;
        }
        let frames: Vec<&str> = r["frames"].as_array().unwrap().iter().map(|f| f["func"].as_str().unwrap_or("")).collect();
        // The time before the program ran (held, then exec'ing) is not its
        // own, nor the dynamic loader's before main (whole from _start, not
        // through main::main: 1.2% of a fresh-clone run, the loader's open
        // preempted on a loaded machine).
        if frames.first().is_some_and(|f| f.starts_with('[')) || frames.get(1) == Some(&"_dl_start") {
            continue;
        }
        let ns = r["ns"].as_u64().unwrap();
        total += ns;
        if frames.first() == Some(&"_start") && frames.contains(&"main::main") {
            rooted += ns;
        } else if example.is_empty() {
            example = frames.join(";");
        }
        let at = |f: &str| frames.iter().position(|x| *x == f);
        if let (Some(s), Some(i)) = (at("main::stage::<[u8; 8]>"), at("main::inner")) {
            if s < i {
                inner += ns;
            }
        }
        if at("main::stage::<[u8; 8]>::{closure#0}").is_some() {
            closure += ns;
        }
    }
    let pct = |n: u64| n as f64 * 100.0 / total.max(1) as f64;
    eprintln!("off-CPU {:.1} ms: {:.1}% from _start through main::main, inner {:.1}%, closure {:.1}%", total as f64 / 1e6, pct(rooted), pct(inner), pct(closure));
    assert!(total > 800_000_000, "only {total} ns off-CPU in a program that sleeps 1 s");
    assert!(pct(rooted) >= 99.0, "{:.1}% of the time from _start through main::main; e.g. {example}", pct(rooted));
    // Each half is 0.5 s of 1 ms sleeps; the loop's own CPU is the rest.
    assert!((40.0..=55.0).contains(&pct(inner)), "inner {:.1}%", pct(inner));
    assert!((40.0..=55.0).contains(&pct(closure)), "closure {:.1}%", pct(closure));
}
