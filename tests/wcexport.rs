//! wcexport: the pprof profile read back by an independent decoder (npm
//! `pprof-format` under Node, tests/wcexport/decode.cjs), and --push
//! checked by a local listener against Pyroscope's documented ingest API.

mod util;

#[path = "wcexport/helpers.rs"]
mod helpers;

use std::collections::{BTreeMap, BTreeSet};

use helpers::{decode, labels, listen, multipart_parts, query_params, sample_input, wall_by_tid};
use serde_json::Value;

const TYPES: [&str; 7] =
    ["wall", "cpu", "off_cpu_runnable", "off_cpu_sleeping", "off_cpu_uninterruptible", "off_cpu_other", "gpu"];

#[test]
fn profile_decodes_with_types_labels_frames_and_mappings() {
    let dir = util::scratch("wcexport-profile");
    let input = sample_input();
    let stream = dir.join("in.stream");
    std::fs::write(&stream, &input).unwrap();
    let out = dir.join("out.pb.gz");
    util::ok("wcexport", &["--pprof", stream.to_str().unwrap(), "-o", out.to_str().unwrap()], b"");
    let p = decode(&out);
    // stdin gives the same profile as a file argument (time_nanos aside:
    // the clock offset is read anew, to the ns).
    let piped = util::run("wcexport", &["--pprof"], input.as_bytes());
    assert!(piped.status.success());
    let piped_file = dir.join("piped.pb.gz");
    std::fs::write(&piped_file, &piped.stdout).unwrap();
    let (mut a, mut b) = (p.clone(), decode(&piped_file));
    a["timeNanos"].take();
    b["timeNanos"].take();
    assert!(a == b, "stdin and file input give different profiles");
    assert_eq!(p["gzipped"], true);
    let types: Vec<(&str, &str)> =
        p["sampleType"].as_array().unwrap().iter().map(|t| (t["type"].as_str().unwrap(), t["unit"].as_str().unwrap())).collect();
    assert_eq!(types, TYPES.map(|t| (t, "nanoseconds")));
    assert_eq!(p["periodType"]["type"], "wall");
    assert_eq!(p["defaultSampleType"], "wall");
    assert_eq!(p["period"], 1);
    assert_eq!(p["durationNanos"], 2_000_000_000u64);

    // Per thread, wall = the thread's accounted on + off time, to the ns.
    let walls = wall_by_tid(&p);
    assert_eq!(walls[&100], 1_000_000_000 + 950_000_000);
    assert_eq!(walls[&101], 400_000_000 + 1_600_000_000);
    for s in p["sample"].as_array().unwrap() {
        let l = labels(s);
        assert_eq!(l["process"], "app", "the process is named by its tid == pid thread, after exec: {l:?}");
        assert_eq!(l["pid"], "100");
        let v: Vec<i64> = s["value"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect();
        match l["state"].as_str() {
            "running" => assert_eq!(v[0], v[1]),
            "sleeping" => assert_eq!(v[0], v[3]),
            "runnable" => assert_eq!(v[0], v[2]),
            "uninterruptible" => assert_eq!(v[0], v[4]),
            "gpu" => assert!(v[0] == 0 && v[6] == 5_000_000, "GPU time is never wall time: {v:?}"),
            other => panic!("state {other}"),
        }
    }
    let thread_names: BTreeSet<String> = p["sample"].as_array().unwrap().iter().map(|s| labels(s)["thread"].clone()).collect();
    assert!(thread_names.contains("bash") && thread_names.contains("worker"), "{thread_names:?}");

    let funcs: BTreeMap<u64, (&str, &str)> = p["function"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["id"].as_u64().unwrap(), (f["name"].as_str().unwrap(), f["file"].as_str().unwrap())))
        .collect();
    let names: BTreeSet<&str> = funcs.values().map(|f| f.0).collect();
    for f in ["[steal]", "[sleep]", "main", "compute", "helper", "schedule"] {
        assert!(names.contains(f), "{f} missing from {names:?}");
    }
    // The inlined helper and the compute it sits in: one Location, innermost first.
    let inl = p["location"].as_array().unwrap().iter().find(|l| l["line"].as_array().unwrap().len() == 2).expect("an inlined location");
    let lines: Vec<(&str, &str, u64)> = inl["line"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let f = funcs[&l["functionId"].as_u64().unwrap()];
            (f.0, f.1, l["line"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(lines, [("helper", "/src/app.c", 7), ("compute", "/src/app.c", 42)]);
    assert_eq!(inl["address"], 0x5000_1234u64, "the raw address of a symbolized frame is kept");
    let maps = p["mapping"].as_array().unwrap();
    let app = &maps[0];
    assert_eq!((app["file"].as_str(), app["buildId"].as_str()), (Some("/usr/bin/app"), Some("ab12cd")), "main binary first");
    assert_eq!((app["start"].as_u64(), app["limit"].as_u64(), app["offset"].as_u64()), (Some(0x5000_0000), Some(0x5001_0000), Some(0x1000)));
    assert_eq!(app["hasFunctions"], true);
    assert_eq!(app["hasInlineFrames"], true);
    assert_eq!(inl["mappingId"], app["id"]);
    // The raw stack: addresses in their mapping, no lines.
    let libc = maps.iter().find(|m| m["file"] == "/lib/libc.so.6").expect("libc mapping");
    let raw = p["location"].as_array().unwrap().iter().find(|l| l["address"] == 0x7000_0042u64).expect("raw location");
    assert_eq!(raw["mappingId"], libc["id"]);
    assert!(raw["line"].as_array().unwrap().is_empty());
    let kernel = maps.iter().find(|m| m["file"] == "[kernel.kallsyms]").expect("kernel mapping");
    assert_eq!(kernel["hasFunctions"], true);
}

#[test]
fn bad_input_is_one_line_naming_the_line() {
    let dir = util::scratch("wcexport-bad");
    let mut input = sample_input();
    input.insert_str(input.find('\n').unwrap() + 1, "{\"type\":\"stack\",\"kind\":\"sideways\"}\n");
    let out = dir.join("never.pb.gz");
    let r = util::run("wcexport", &["--pprof", "-o", out.to_str().unwrap()], input.as_bytes());
    assert_eq!(r.status.code(), Some(1));
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("<stdin>: line 2:"), "{err}");
    assert!(!out.exists(), "no partial profile is written");
    let r = util::run("wcexport", &["--pprof"], b"");
    assert!(String::from_utf8_lossy(&r.stderr).contains("no stacks"), "empty input says so");
}

#[test]
fn push_sends_what_the_ingest_api_documents() {
    let dir = util::scratch("wcexport-push");
    let stream = dir.join("in.stream");
    std::fs::write(&stream, sample_input()).unwrap();
    let (url, server) = listen("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    let saved = dir.join("saved.pb.gz");
    util::ok(
        "wcexport",
        &[stream.to_str().unwrap(), "--push", &url, "--label", "env=test", "-o", saved.to_str().unwrap()],
        b"",
    );
    let (head, body) = server.join().unwrap();
    let request_line = head.lines().next().unwrap();
    let (method, rest) = request_line.split_once(' ').unwrap();
    assert_eq!(method, "POST");
    let (target, proto) = rest.rsplit_once(' ').unwrap();
    assert_eq!(proto, "HTTP/1.1");
    let (path, query) = target.split_once('?').expect("a query");
    assert_eq!(path, "/ingest");
    let q = query_params(query);
    assert_eq!(q["name"], "app{env=test}", "default application name: the process's");
    assert_eq!(q["format"], "pprof");
    let (from, until): (u64, u64) = (q["from"].parse().unwrap(), q["until"].parse().unwrap());
    assert!((2..=3).contains(&(until - from)), "a 2 s window: from {from} until {until}");
    let p = decode(&saved);
    // The decoder gives int64s past 2^53 as strings.
    let time_nanos: u64 = p["timeNanos"].as_u64().unwrap_or_else(|| p["timeNanos"].as_str().unwrap().parse().unwrap());
    assert_eq!(from, time_nanos / 1_000_000_000, "from is the profile's start, UNIX seconds");
    let headers: BTreeMap<String, String> = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    assert!(headers.contains_key("host"));
    assert_eq!(headers["content-length"].parse::<usize>().unwrap(), body.len());
    let boundary = headers["content-type"].strip_prefix("multipart/form-data; boundary=").expect("multipart/form-data");
    let parts = multipart_parts(&body, boundary);
    let profile = &parts["profile"];
    assert_eq!(profile, &std::fs::read(&saved).unwrap(), "the file field `profile` holds the profile");
    let sent = dir.join("sent.pb.gz");
    std::fs::write(&sent, profile).unwrap();
    let decoded = decode(&sent);
    assert_eq!(decoded["gzipped"], true);
    assert_eq!(decoded["sampleType"], p["sampleType"]);
    let config: Value = serde_json::from_slice(&parts["sample_type_config"]).expect("sample_type_config is JSON");
    for t in TYPES {
        assert_eq!(config[t]["aggregation"], "sum", "{t} configured: {config}");
    }
}

#[test]
fn push_errors_are_one_line() {
    let dir = util::scratch("wcexport-push-err");
    let stream = dir.join("in.stream");
    std::fs::write(&stream, sample_input()).unwrap();
    let (url, server) = listen("HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\r\nprofile rejected: no such tenant\nsecond line\n");
    let r = util::run("wcexport", &[stream.to_str().unwrap(), "--push", &url], b"");
    server.join().unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("400 Bad Request") && err.contains("profile rejected: no such tenant"), "{err}");

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let r = util::run("wcexport", &[stream.to_str().unwrap(), "--push", &format!("http://127.0.0.1:{port}")], b"");
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}")) && err.contains("refused"), "{err}");

    let r = util::run("wcexport", &[stream.to_str().unwrap(), "--push", "https://example.invalid"], b"");
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("https is not supported") && err.trim().lines().count() == 1, "{err}");
}

/// A real capture: the demo workload (which measures its own CPU and wall
/// time per function) profiled by scripts/wallclock, its PREFIX.stream
/// exported and decoded. Per thread the wall values add up to the
/// thread's accounted time within 1%, and each function's on- and
/// off-CPU shares of its thread's life are the workload's own within 3
/// points.
#[test]
fn real_capture_agrees_with_ground_truth() {
    if !util::is_root() {
        eprintln!("SKIPPED: the capture needs root (BPF)");
        return;
    }
    let dir = util::scratch("wcexport-demo");
    let bin = dir.join("workload");
    let st = std::process::Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls", "-pthread", "-o"])
        .arg(&bin)
        .arg(util::root().join("scripts/demo/workload.c"))
        .status()
        .expect("gcc");
    assert!(st.success(), "building the demo workload failed");
    let prefix = dir.join("demo");
    let out = std::process::Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["-o", prefix.to_str().unwrap(), "--", bin.to_str().unwrap(), "4", dir.join("scratch.dat").to_str().unwrap()])
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
