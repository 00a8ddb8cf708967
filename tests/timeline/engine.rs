//! The trace read by an independent reader from the registries: the
//! DevTools performance panel's trace engine (npm
//! `@paulirish/trace_engine`, under target/npm), whose per-thread slices
//! must be the stream's slice records, one for one, to the ns.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::util;

fn npm_prefix() -> PathBuf {
    let p = std::env::var_os("WALLCLOCK_NPM_PREFIX").map(PathBuf::from).unwrap_or_else(|| util::root().join("target/npm"));
    assert!(
        p.join("node_modules/@paulirish/trace_engine").is_dir(),
        "{}: npm @paulirish/trace_engine is not installed there: run `scripts/setup --tests`",
        p.display()
    );
    p
}

/// The engine's view of `trace`: per tid, its slices' count and ns per name.
pub fn read(trace: &Path) -> Value {
    let o = Command::new("node")
        .arg(util::root().join("tests/timeline/trace_engine.mjs"))
        .arg(npm_prefix())
        .arg(trace)
        .output()
        .expect("run node (Node 20: apt-get install nodejs)");
    assert!(o.status.success(), "trace engine on {}: {}", trace.display(), String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Every thread with slice records: the engine has as many slices, with
/// the same ns per state, from the same first start to the same end.
pub fn check(trace: &Path, recs: &[Value]) {
    let seen = read(trace);
    let u = |v: &Value| v.as_u64().unwrap_or(0);
    let start = recs.iter().find(|r| r["type"] == "header").map_or(0, |h| u(&h["start_ns"]));
    let mut want: BTreeMap<u64, (u64, BTreeMap<String, u64>, u64, u64)> = BTreeMap::new();
    for s in recs.iter().filter(|r| r["type"] == "slice") {
        let name = match (s["kind"].as_str(), s["state"].as_str()) {
            (Some("on"), _) => "running",
            (_, Some("R")) => "runnable",
            (_, Some("S")) => "sleeping",
            (_, Some("D")) => "uninterruptible",
            _ => "other",
        };
        let (a, b) = (u(&s["start_ns"]) - start, u(&s["end_ns"]) - start);
        let e = want.entry(u(&s["tid"])).or_insert((0, BTreeMap::new(), u64::MAX, 0));
        e.0 += 1;
        *e.1.entry(name.to_string()).or_default() += b - a;
        e.2 = e.2.min(a);
        e.3 = e.3.max(b);
    }
    assert!(!want.is_empty(), "no slice records to compare");
    for (tid, (n, ns, first, end)) in &want {
        let t = &seen[tid.to_string()];
        assert!(t.is_object(), "the trace engine has no track for thread {tid}: {}", seen.as_object().map(|o| o.len()).unwrap_or(0));
        let got: BTreeMap<String, u64> = t["ns"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), u(v))).collect();
        assert_eq!((u(&t["slices"]), &got), (*n, ns), "thread {tid}: the engine's slices and ns per state against the stream's");
        assert_eq!((u(&t["first_ns"]), u(&t["end_ns"])), (*first, *end), "thread {tid}: first start and last end");
    }
    eprintln!("trace engine: {} threads, {} slices, as the stream has them", want.len(), want.values().map(|w| w.0).sum::<u64>());
}
