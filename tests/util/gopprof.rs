//! `go tool pprof` (Debian's golang-go), the reader people use, on a
//! profile: its totals per sample type (`-top -sample_index=T`) and its
//! per-label sums (`-tags`), in nanoseconds, for the tests to compare
//! with the stream's figures.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn pprof(profile: &Path, args: &[&str]) -> String {
    // -symbolize=none: offline, and the profile's own names are what is checked.
    let out = Command::new("go")
        .args(["tool", "pprof", "-symbolize=none", "-unit=ns"])
        .args(args)
        .arg(profile)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("run `go tool pprof` (Debian's golang-go: scripts/setup --tests installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "go tool pprof {args:?} {}: {}", profile.display(), String::from_utf8_lossy(&out.stderr));
    text
}

/// `1600000000ns` or `3950000000.0ns` -> ns.
fn ns(word: &str) -> Option<u64> {
    let n = word.trim().strip_suffix("ns")?;
    n.parse::<u64>().ok().or_else(|| n.parse::<f64>().ok().map(|f| f.round() as u64))
}

/// The total of sample type `t`, as `-top` says it (`Showing nodes
/// accounting for Nns, P% of Mns total`: 0 when pprof finds nothing of
/// that type), checked to be all under some frame (N = M).
pub fn total(profile: &Path, t: &str) -> u64 {
    let text = pprof(profile, &[&format!("-sample_index={t}"), "-nodefraction=0", "-top"]);
    let Some(line) = text.lines().find(|l| l.starts_with("Showing nodes accounting for ")) else { return 0 };
    let shown = line["Showing nodes accounting for ".len()..].split(',').next().and_then(ns);
    let total = line.split(" of ").nth(1).and_then(|r| r.strip_suffix(" total")).and_then(ns);
    assert_eq!(shown, total, "go tool pprof -sample_index={t} -top: time under no frame in {}: {line}", profile.display());
    total.unwrap_or(0)
}

/// Per label key, each value's summed `t` (`-tags`).
pub fn tags(profile: &Path, t: &str) -> BTreeMap<String, BTreeMap<String, u64>> {
    let text = pprof(profile, &[&format!("-sample_index={t}"), "-tags"]);
    let mut out: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let mut key = None;
    for l in text.lines() {
        let l = l.trim();
        if let Some((k, rest)) = l.split_once(": Total ") {
            if ns(rest).is_some() {
                key = Some(k.to_string());
                out.entry(k.to_string()).or_default();
                continue;
            }
        }
        // `1950000000.0ns (49.37%): 100`
        if let (Some(k), Some((v, name))) = (&key, l.split_once("): ")) {
            if let Some(v) = v.split_whitespace().next().and_then(ns) {
                *out.get_mut(k).unwrap().entry(name.to_string()).or_default() += v;
            }
        }
    }
    out
}
