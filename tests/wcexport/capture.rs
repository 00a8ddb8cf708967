//! wcexport on a real capture, as root (tests/wcexport.rs's module).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::helpers::{decode, labels, wall_by_tid};
use super::util;

/// A real capture: the demo workload (which measures its own CPU and wall
/// time per function) profiled by scripts/wallclock, its PREFIX.stream
/// exported and decoded. Per thread the wall values add up to the
/// thread's accounted time within 1%, and each function's on- and
/// off-CPU shares of its thread's life are the workload's own within 3
/// points.
#[test]
fn real_capture_agrees_with_ground_truth() {
    if util::skip_without_root("wcexport capture") {
        return;
    }
    let dir = util::scratch("wcexport-demo");
    let bin = util::build_demo(&dir);
    let prefix = dir.join("demo");
    let out = std::process::Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["--prefix", prefix.to_str().unwrap(), "--", bin.to_str().unwrap(), "4", dir.join("scratch.dat").to_str().unwrap()])
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .output()
        .expect("run scripts/wallclock");
    assert!(out.status.success(), "wallclock failed: {}", String::from_utf8_lossy(&out.stderr));
    let truth: Value = serde_json::from_slice(&out.stdout).expect("the workload's stdout is its JSON truth");
    let stream = prefix.with_extension("stream");
    let pb = dir.join("demo.pb.gz");
    util::ok("wcexport", &["--pprof", stream.to_str().unwrap(), "-o", pb.to_str().unwrap()], b"");
    let p = decode(&pb);

    // The stream's own accounting per thread: on + off, life, steal.
    let mut acct: BTreeMap<u64, (i64, f64, f64)> = BTreeMap::new();
    for line in std::fs::read_to_string(&stream).unwrap().lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        if r["type"] != "thread" {
            continue;
        }
        let off: i64 = ["R", "S", "D", "other"].iter().map(|k| r["off_ns"][k].as_i64().unwrap_or(0)).sum();
        let life = (r["end_ns"].as_i64().unwrap() - r["start_ns"].as_i64().unwrap()) as f64;
        acct.insert(r["tid"].as_u64().unwrap(), (r["on_ns"].as_i64().unwrap() + off, life, r["steal_ns"].as_f64().unwrap_or(0.0)));
    }
    let walls = wall_by_tid(&p);
    for (tid, (accounted, _, _)) in &acct {
        let got = walls.get(tid).copied().unwrap_or(0);
        let err = 100.0 * (got - accounted).abs() as f64 / *accounted as f64;
        eprintln!("thread {tid}: wall {got} ns, accounted {accounted} ns ({err:.3}% apart)");
        assert!(err <= 1.0, "thread {tid}: summed wall {got} vs on + off {accounted}");
    }

    // (tid, function) -> (on ns, off ns), each sample counted once per
    // function in its stack, as a flame graph's frame width counts it.
    let funcs: BTreeMap<u64, String> =
        p["function"].as_array().unwrap().iter().map(|f| (f["id"].as_u64().unwrap(), f["name"].as_str().unwrap().to_string())).collect();
    let locs: BTreeMap<u64, Vec<u64>> = p["location"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["id"].as_u64().unwrap(), l["line"].as_array().unwrap().iter().map(|x| x["functionId"].as_u64().unwrap()).collect()))
        .collect();
    let mut by_func: BTreeMap<(u64, String), (f64, f64)> = BTreeMap::new();
    for s in p["sample"].as_array().unwrap() {
        let tid: u64 = labels(s)["thread_id"].parse().unwrap();
        let v: Vec<f64> = s["value"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        let names: BTreeSet<&String> =
            s["locationId"].as_array().unwrap().iter().flat_map(|l| &locs[&l.as_u64().unwrap()]).map(|f| &funcs[f]).collect();
        for n in names {
            let e = by_func.entry((tid, n.clone())).or_default();
            e.0 += v[1];
            e.1 += v[2] + v[3] + v[4] + v[5];
        }
    }
    let mut errors = Vec::new();
    for t in truth["threads"].as_array().unwrap() {
        let tid = t["tid"].as_u64().unwrap();
        let (_, life, steal) = acct[&tid];
        for (name, f) in t["functions"].as_object().unwrap() {
            if name == "lock_wait" {
                continue; // measured inside locked_update, around pthread_mutex_lock
            }
            let cpu = f["cpu_ns"].as_f64().unwrap();
            let off = f["wall_ns"].as_f64().unwrap() - cpu;
            let (got_on, got_off) = by_func.get(&(tid, name.clone())).copied().unwrap_or_default();
            let (t_on, t_off) = (100.0 * cpu / life, 100.0 * off / life);
            let (p_on, p_off) = (100.0 * got_on / life, 100.0 * got_off / life);
            // Steal is on-CPU for the scheduler ([steal], apart from the
            // functions) and off the workload's CPU clock: a function's
            // off-CPU share may fall short of the truth by its thread's steal.
            let stolen = 100.0 * steal / life;
            eprintln!("thread {tid} {name}: on {p_on:.1}% (truth {t_on:.1}%), off {p_off:.1}% (truth {t_off:.1}%), steal {stolen:.1}%");
            if (p_on - t_on).abs() > 3.0 || t_off - p_off > 3.0 + stolen || p_off - t_off > 3.0 {
                errors.push(format!("thread {tid} {name}: on {p_on:.1}% vs {t_on:.1}%, off {p_off:.1}% vs {t_off:.1}%"));
            }
        }
    }
    assert!(errors.is_empty(), "shares off by more than 3 points:\n{}", errors.join("\n"));
}
