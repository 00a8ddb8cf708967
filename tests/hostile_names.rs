//! Names that are not text: every control byte (0x00-0x1f, 0x7f) and bytes
//! that are not UTF-8, in frame names and a thread name, in a stream and in
//! plain folded lines, through every tool that writes text. Each output is
//! read back by an independent reader (serde_json, Python's expat for the
//! SVG, npm pprof-format for the profile) and each name reads back as the
//! documented marker: `[bad name] ` then the name with `\xHH` for each
//! control character and `\u{fffd}` where bytes were not UTF-8
//! (wallclock_stream::names, wallclock-stream(5)).

mod util;

#[path = "wcexport/helpers.rs"]
#[allow(dead_code)]
mod helpers;

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{json, Value};
use util::{ok, run, scratch};

/// Every control byte.
fn controls() -> Vec<u8> {
    (0u8..0x20).chain([0x7f]).collect()
}

/// The marker each bad name must read back as.
fn marker(inner: &str) -> String {
    format!("[bad name] {inner}")
}

/// (stream bytes, the names it must show): 34 stacks, each with one bad
/// frame between `main` and `leaf`, a thread named with a control byte,
/// and a timeline slice whose stack holds a bad frame.
fn hostile_stream() -> (Vec<u8>, BTreeSet<String>) {
    let mut lines: Vec<Vec<u8>> = vec![
        json!({"type":"header","format":"wallclock","version":"1.3","tool":"test","tool_version":"0","pids":[7],"clock":"monotonic","start_ns":0,"end_ns":1_000_000_000u64}).to_string().into_bytes(),
        json!({"type":"thread","pid":7,"tid":7,"comm":"w\u{1}\u{1b}[31m","start_ns":0,"end_ns":1_000_000_000u64,"on_ns":700_000_000u64}).to_string().into_bytes(),
    ];
    let mut want = BTreeSet::new();
    for (i, b) in controls().into_iter().enumerate() {
        let name = format!("f{}x", char::from(b));
        let frames = json!([{"func":"main"},{"func":name,"file":format!("/src/{}.c", char::from(b))},{"func":"leaf"}]);
        let rec = json!({"type":"stack","kind":"on","pid":7,"tid":7,"comm":"w","frames":frames,"ns":10_000_000 + i as u64,"count":1});
        lines.push(rec.to_string().into_bytes());
        want.insert(marker(&format!("f\\x{b:02x}x")));
    }
    // Bytes that are not UTF-8, raw in the JSON line.
    let rec = json!({"type":"stack","kind":"on","pid":7,"tid":7,"comm":"w","frames":[{"func":"main"},{"func":"g@@x"},{"func":"leaf"}],"ns":5_000_000,"count":1});
    let text = rec.to_string().into_bytes();
    let at = text.windows(2).position(|w| w == b"@@").unwrap();
    lines.push([&text[..at], &b"\xff\xfe"[..], &text[at + 2..]].concat());
    want.insert(marker("g\\u{fffd}\\u{fffd}x"));
    lines.push(json!({"type":"slice_stack","id":1,"pid":7,"frames":[{"func":"main"},{"func":"s\u{0}\u{7}y"}]}).to_string().into_bytes());
    lines.push(json!({"type":"slice","kind":"off","state":"S","pid":7,"tid":7,"start_ns":100,"end_ns":200_000,"stack":1}).to_string().into_bytes());
    lines.push(json!({"type":"slice","kind":"on","pid":7,"tid":7,"start_ns":200_000,"end_ns":900_000}).to_string().into_bytes());
    lines.push(json!({"type":"stats","end_ns":1_000_000_000u64,"counts":{}}).to_string().into_bytes());
    let mut bytes = lines.join(&b'\n');
    bytes.push(b'\n');
    (bytes, want)
}

/// Plain folded lines with raw control bytes (a newline as `%0A`, the
/// folded escape) and bytes that are not UTF-8.
fn hostile_folded() -> (Vec<u8>, BTreeSet<String>) {
    let mut out = Vec::new();
    let mut want = BTreeSet::new();
    for b in controls() {
        let name: Vec<u8> = if b == b'\n' { b"f%0Ax".to_vec() } else { vec![b'f', b, b'x'] };
        out.extend_from_slice(b"main;");
        out.extend_from_slice(&name);
        out.extend_from_slice(format!(";leaf {}\n", 100 + b as u32).as_bytes());
        want.insert(marker(&format!("f\\x{b:02x}x")));
    }
    out.extend_from_slice(b"main;g\xc3x;leaf 50\n");
    want.insert(marker("g\\u{fffd}x"));
    (out, want)
}

/// Every string in a JSON value.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => o.iter().for_each(|(k, x)| {
            out.push(k.clone());
            strings(x, out)
        }),
        _ => {}
    }
}

/// No string holds a control character, and every wanted name is one of
/// them (as a whole, or as a `;`-separated or listed frame).
fn assert_names(what: &str, all: &[String], want: &BTreeSet<String>) {
    for s in all {
        assert!(!s.chars().any(char::is_control), "{what}: a control character in {s:?}");
    }
    let pieces: BTreeSet<&str> = all.iter().flat_map(|s| s.split(';')).map(|p| p.trim_end_matches(" [k]")).collect();
    let missing: Vec<&String> = want.iter().filter(|w| !pieces.contains(w.as_str())).collect();
    assert!(missing.is_empty(), "{what}: names missing {missing:?}; read: {:?}", pieces.iter().filter(|p| p.contains("bad")).collect::<Vec<_>>());
}

/// The SVG parsed by Python's expat (which refuses what XML 1.0 forbids,
/// as browsers do): the names of its boxes, from their titles.
fn svg_names(svg: &Path) -> Vec<String> {
    let script = "import sys, json, xml.etree.ElementTree as E\n\
                  t = E.parse(sys.argv[1])\n\
                  print(json.dumps([e.text or '' for e in t.iter() if e.tag.endswith('title')]))";
    let py = if Path::new("/usr/bin/python3").exists() { "/usr/bin/python3" } else { "python3" };
    let out = std::process::Command::new(py).args(["-c", script]).arg(svg).output().expect("run python3");
    assert!(out.status.success(), "{} is not XML: {}", svg.display(), String::from_utf8_lossy(&out.stderr));
    let titles: Vec<String> = serde_json::from_slice(&out.stdout).unwrap();
    titles.iter().map(|t| t.rfind(" (").map_or(t.as_str(), |i| &t[..i]).to_string()).collect()
}

fn json_lines(text: &str) -> Vec<String> {
    let mut all = Vec::new();
    for l in text.lines().filter(|l| !l.is_empty()) {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        strings(&v, &mut all);
    }
    all
}

#[test]
fn stream_names_read_back_as_the_marker() {
    let (input, want) = hostile_stream();
    let d = scratch("hostile-stream");
    let src = d.join("in.jsonl");
    std::fs::write(&src, &input).unwrap();
    let src = src.to_str().unwrap();

    // stacksym: a stream of JSON lines, the names in its frame records,
    // each replacement counted in the trailer.
    let sym = ok("stacksym", &[src], b"");
    let strs = json_lines(&sym);
    assert_names("stacksym", &strs, &want);
    assert!(strs.contains(&marker("w\\x01\\x1b[31m")), "the thread's name");
    let trailer: Value = serde_json::from_str(sym.lines().rfind(|l| l.contains("\"stats\"")).unwrap()).unwrap();
    let bad = trailer["counts"]["bad_names"].as_u64().unwrap_or(0);
    assert!(bad > want.len() as u64, "bad_names {bad} in {trailer}: the names and the thread's");

    let folded = ok("stackmerge", &["--folded", src], b"");
    let lines: Vec<String> = folded.lines().map(|l| l.rsplit_once(' ').unwrap().0.to_string()).collect();
    assert_names("stackmerge --folded", &lines, &want);

    let svg = d.join("s.svg");
    ok("flame", &[src, "-o", svg.to_str().unwrap()], b"");
    assert_names("flame", &svg_names(&svg), &want);

    let report: Value = serde_json::from_str(&ok("wcreport", &["--json", "--top", "100", src], b"")).unwrap();
    let mut strs = Vec::new();
    strings(&report, &mut strs);
    assert_names("wcreport --json", &strs, &want);

    let pb = d.join("p.pb.gz");
    ok("wcexport", &["--pprof", src, "-o", pb.to_str().unwrap()], b"");
    let p = helpers::decode(&pb);
    let mut strs = Vec::new();
    strings(&p["function"], &mut strs);
    assert_names("wcexport --pprof", &strs, &want);

    let trace: Value = serde_json::from_str(&ok("wcexport", &["--trace", src], b"")).unwrap();
    let mut strs = Vec::new();
    strings(&trace, &mut strs);
    assert_names("wcexport --trace", &strs, &BTreeSet::from([marker("s\\x00\\x07y")]));
    // The thread's track: `NAME TID`.
    assert!(strs.iter().any(|s| s.starts_with(&marker("w\\x01\\x1b[31m "))), "the thread's track");
}

#[test]
fn folded_names_read_back_as_the_marker() {
    let (input, want) = hostile_folded();
    let d = scratch("hostile-folded");
    let src = d.join("in.folded");
    std::fs::write(&src, &input).unwrap();
    let src = src.to_str().unwrap();

    assert_names("stacksym", &json_lines(&ok("stacksym", &[src], b"")), &want);
    let folded = ok("stackmerge", &["--folded", src], b"");
    let lines: Vec<String> = folded.lines().map(|l| l.rsplit_once(' ').unwrap().0.to_string()).collect();
    assert_names("stackmerge --folded", &lines, &want);
    // flame reads plain folded lines without the stream's reader.
    let svg = d.join("f.svg");
    ok("flame", &[src, "-o", svg.to_str().unwrap()], b"");
    assert_names("flame", &svg_names(&svg), &want);
    let out = run("flame", &[], &input);
    assert!(out.status.success());
    std::fs::write(d.join("stdin.svg"), &out.stdout).unwrap();
    assert_names("flame < stdin", &svg_names(&d.join("stdin.svg")), &want);

    let report: Value = serde_json::from_str(&ok("wcreport", &["--json", "--top", "100", src], b"")).unwrap();
    let mut strs = Vec::new();
    strings(&report, &mut strs);
    assert_names("wcreport --json", &strs, &want);

    let pb = d.join("f.pb.gz");
    ok("wcexport", &["--pprof", src, "-o", pb.to_str().unwrap()], b"");
    let mut strs = Vec::new();
    strings(&helpers::decode(&pb)["function"], &mut strs);
    assert_names("wcexport --pprof", &strs, &want);
}
