//! scripts/wallclock --every: the window profiles, decoded by npm
//! pprof-format, against the profile of the whole capture (tests/wcexport.rs's
//! module; root).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::helpers::decode;
use super::util;

/// An int64 of the decoded profile: a number, or a string when over 2^53.
fn int(v: &Value) -> i64 {
    v.as_i64().or_else(|| v.as_str().and_then(|s| s.parse().ok())).unwrap_or_else(|| panic!("not an int64: {v}"))
}

/// Summed values per sample type.
fn totals(p: &Value) -> BTreeMap<String, i64> {
    let types: Vec<String> = p["sampleType"].as_array().unwrap().iter().map(|t| t["type"].as_str().unwrap().to_string()).collect();
    let mut m = BTreeMap::new();
    for s in p["sample"].as_array().unwrap() {
        for (t, v) in types.iter().zip(s["value"].as_array().unwrap()) {
            *m.entry(t.clone()).or_default() += int(v);
        }
    }
    m
}

/// `wallclock --every 2 -d 10 PID`: five profiles, back to back in time,
/// whose values add up to the profile of the whole 10 s capture within 2%
/// (of its wall time) for every sample type.
#[test]
fn every_2_over_10_s_gives_5_profiles_that_add_up() {
    if util::skip_without_root("wcexport every") {
        return;
    }
    let dir = util::scratch("wcexport-every");
    let wl = util::build_c("tests/programs/capture/workload.c", &dir, "workload");
    // It outlives the capture even when a loaded machine takes seconds to
    // attach (then, ended early, the capture had 4 windows); killed after.
    let mut w = Command::new(&wl).arg("40").arg(&dir).stdout(Stdio::null()).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let prefix = dir.join("run");
    let out = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["--every", "2", "-d", "10", "--prefix", prefix.to_str().unwrap(), &w.id().to_string()])
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .output()
        .expect("run scripts/wallclock");
    let _ = w.kill();
    let _ = w.wait();
    assert!(out.status.success(), "wallclock failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(!dir.join("run.6.pb.gz").exists(), "a sixth window");
    let missing: Vec<usize> = (1..=5).filter(|i| !dir.join(format!("run.{i}.pb.gz")).exists()).collect();
    assert!(missing.is_empty(), "windows {missing:?} not written: {}", String::from_utf8_lossy(&out.stderr));
    let wins: Vec<Value> = (1..=5).map(|i| decode(&dir.join(format!("run.{i}.pb.gz")))).collect();
    let whole = decode(&dir.join("run.pb.gz"));

    // Back to back: each window starts where the one before ended (the
    // UTC offset of each export is read anew: within a millisecond).
    for pair in wins.windows(2) {
        let end = int(&pair[0]["timeNanos"]) + int(&pair[0]["durationNanos"]);
        let next = int(&pair[1]["timeNanos"]);
        assert!((end - next).abs() < 1_000_000, "a window ends at {end}, the next starts at {next}");
    }
    let wsum: i64 = wins.iter().map(|p| int(&p["durationNanos"])).sum();
    assert_eq!(wsum, int(&whole["durationNanos"]), "the windows' durations add up to the capture's");

    let all = totals(&whole);
    let mut sum: BTreeMap<String, i64> = BTreeMap::new();
    for p in &wins {
        for (k, v) in totals(p) {
            *sum.entry(k).or_default() += v;
        }
    }
    let wall = all["wall"];
    for (k, v) in &all {
        let got = sum.get(k).copied().unwrap_or(0);
        let err = (got - v).abs() as f64 / wall as f64;
        eprintln!("every: {k}: windows {got} ns, whole {v} ns ({:+.3}% of wall)", (got - v) as f64 * 100.0 / wall as f64);
        assert!(err <= 0.02, "{k}: windows {got} vs whole {v}");
    }
}
