//! wcexport: the pprof profile read back by an independent decoder (npm
//! `pprof-format` under Node, tests/wcexport/decode.cjs), and --push
//! checked by a local listener against Pyroscope's documented ingest API.

mod util;

#[path = "wcexport/helpers.rs"]
mod helpers;
#[path = "wcexport/capture.rs"]
mod capture;
#[path = "wcexport/every.rs"]
mod every;

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

/// Unsymbolized input (capture tools' output before stacksym) still
/// exports: Locations with the raw addresses in their mappings, no names.
#[test]
fn raw_input_gives_addresses_in_mappings() {
    let dir = util::scratch("wcexport-raw");
    let raw: Vec<String> = sample_input()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if let Some(o) = v.as_object_mut() {
                o.remove("frames");
            }
            v.to_string()
        })
        .collect();
    let out = dir.join("raw.pb.gz");
    util::ok("wcexport", &["--pprof", "-o", out.to_str().unwrap()], (raw.join("\n") + "\n").as_bytes());
    let p = decode(&out);
    // No names invented, but a stack with neither frames nor addresses
    // (here [steal] and [before exec], their frames taken off) keeps its
    // time under `[no frames]`, where go tool pprof shows it.
    let names: Vec<&str> = p["function"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["[no frames]"], "no names invented");
    let walls = wall_by_tid(&p);
    assert_eq!((walls[&100], walls[&101]), (1_950_000_000, 2_000_000_000), "time as the stream has it");
    let maps = p["mapping"].as_array().unwrap();
    let app = maps.iter().find(|m| m["file"] == "/usr/bin/app").unwrap();
    assert_eq!(app["buildId"], "ab12cd");
    assert_eq!(app["hasFunctions"], false, "left for pprof to symbolize by build id");
    let loc = p["location"].as_array().unwrap().iter().find(|l| l["address"] == 0x5000_1234u64).expect("the raw leaf address");
    assert_eq!(loc["mappingId"], app["id"]);
    // A sample's locations are leaf first: the leaf of the compute stack.
    let s = p["sample"].as_array().unwrap().iter().find(|s| s["locationId"].as_array().unwrap().len() == 2 && labels(s)["state"] == "running" && labels(s)["thread_id"] == "100").unwrap();
    assert_eq!(s["locationId"][0], loc["id"]);
}
