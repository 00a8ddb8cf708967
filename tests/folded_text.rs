//! Folded text is one rule (wallclock-stream(5), FOLDED LINES): the same
//! stack prints the same text from every tool, whatever bytes its frame
//! names hold, and a real Rust program's names (`;` and spaces in generic
//! arguments, a function beside its own closure) go through
//! `stacksym | stackmerge | flame` end to end.

mod util;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use util::{ok, run, scratch};
use wallclock_stream::{folded, Frame, Header, Kind, MapEntry, Maps, Record, Stack, State, Thread};

fn jsonl(recs: &[Record]) -> String {
    recs.iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect()
}

/// Box names of a flame graph SVG (`<title>NAME (...)</title>`), XML unescaped.
fn box_names(svg: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = svg;
    while let Some(i) = rest.find("<g><title>") {
        rest = &rest[i + 10..];
        let t = &rest[..rest.find("</title>").unwrap()];
        let name = &t[..t.rfind(" (").unwrap_or(t.len())];
        let name = name
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&#39;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&");
        out.insert(name);
    }
    out
}

/// Names a demangler can produce that break naive folded writers.
const AWKWARD: [&str; 7] = [
    "smallvec::SmallVec<[parking_lot_core::UnparkHandle; 8]>::push",
    "<core::ops::Range<u64> as core::iter::Iterator>::next",
    "say(\"hi; there\")",
    "it's 100% done",
    " padded ",
    "not_[k]",
    "café ünïcode ☃",
];

fn awkward_stack() -> Stack {
    let mut s = Stack::new(Kind::Off, 7, 7, "app");
    s.state = Some(State::S);
    s.frames = AWKWARD.iter().map(|n| Frame::named(*n)).collect();
    s.frames.push(Frame::kernel("schedule"));
    s.ns = 5_000_000;
    s.count = 1;
    s
}

/// One stack with awkward frames through every tool that prints folded
/// text or frame names: the capture tools' folded writer, `stackmerge
/// --folded`, `wcreport --json` (its top stacks) and `flame` (its boxes).
/// The text between the root and the leaf is the same everywhere, and
/// reading it back gives the names as they went in.
#[test]
fn one_stack_same_text_in_every_tool() {
    let s = awkward_stack();
    let mut h = Header::new("test", "0");
    h.pids = vec![7];
    let mut t = Thread::new(7, 7, "app");
    t.off_ns = Some(wallclock_stream::StateNs { s: 5_000_000, ..Default::default() });
    let stream = jsonl(&[Record::Header(h), Record::Thread(t), Record::Stack(s.clone())]);
    // The frames' text, as the one rule writes it.
    let frames = folded::stack_text::<&str>(&[], &s.frames);
    assert!(frames.contains("SmallVec<[parking_lot_core::UnparkHandle%3B 8]>"), "{frames}");
    assert_eq!(frames.matches(';').count(), AWKWARD.len(), "one `;` per frame boundary: {frames}");

    // offcputime/oncputime --folded (their writer; a capture needs root).
    let capture = wallclock_capture::output::folded_key(&s);
    assert_eq!(capture, format!("app;{frames}"));

    // stackmerge --folded.
    let merged = ok("stackmerge", &["--folded", "--unit", "ns"], stream.as_bytes());
    assert_eq!(merged, format!("app (7);{frames};[sleep]_[o] 5000000\n"));
    // ... and read back by stackmerge itself: the same names, the same line.
    let back = folded::parse_line(merged.trim_end(), 1).unwrap();
    let names: Vec<&str> = back.frames[1..=AWKWARD.len()].iter().map(|f| f.func.as_str()).collect();
    assert_eq!(names, AWKWARD);
    assert!(back.frames[AWKWARD.len() + 1].kernel && !back.frames[AWKWARD.len()].kernel);
    let merged_us = ok("stackmerge", &["--folded"], stream.as_bytes());
    assert_eq!(ok("stackmerge", &["--folded"], merged_us.as_bytes()), merged_us);

    // wcreport --json: the top stack's text.
    let report: serde_json::Value = serde_json::from_str(&ok("wcreport", &["--json"], stream.as_bytes())).unwrap();
    let texts: Vec<String> = collect_strings(&report).into_iter().filter(|t| t.contains("UnparkHandle")).collect();
    assert!(!texts.is_empty(), "no stack text in wcreport --json");
    for t in texts {
        assert_eq!(t, format!("{frames};[sleep]"));
    }

    // flame: one box per frame, named by the same text, shown unescaped
    // (annotations are colours there, not text).
    let svg = ok("flame", &[], stream.as_bytes());
    let boxes = box_names(&svg);
    let frames = frames.replace("_[k]", "");
    for f in frames.split(';') {
        let f = wallclock_stream::folded::unescape(f);
        assert!(boxes.contains(f.as_ref()), "flame has no box {f:?}: {boxes:?}");
    }
    // flame reads stackmerge's folded line to the same boxes.
    let svg2 = ok("flame", &[], merged.as_bytes());
    let boxes2 = box_names(&svg2);
    for f in frames.split(';') {
        let f = wallclock_stream::folded::unescape(f);
        assert!(boxes2.contains(f.as_ref()), "flame (folded) has no box {f:?}");
    }
}

fn collect_strings(v: &serde_json::Value) -> Vec<String> {
    match v {
        serde_json::Value::String(s) => vec![s.clone()],
        serde_json::Value::Array(a) => a.iter().flat_map(collect_strings).collect(),
        serde_json::Value::Object(o) => o.values().flat_map(collect_strings).collect(),
        _ => vec![],
    }
}

/// Bytes that are not UTF-8 in a folded line are read as U+FFFD by every
/// tool (the stream is UTF-8), never an error, and the name is marked as
/// one that was not text (wallclock-stream(5), NAMES), alike everywhere.
#[test]
fn non_utf8_bytes_are_carried_not_fatal() {
    let mut line = b"app;caf".to_vec();
    line.extend_from_slice(&[0xe9, 0xff]);
    line.extend_from_slice(b";leaf 12\n");
    let merged = ok("stackmerge", &["--folded", "--unit", "ns"], &line);
    assert_eq!(merged, "app;[bad name] caf\\u{fffd}\\u{fffd};leaf_[o] 12000\n");
    let svg = ok("flame", &[], &line);
    assert!(box_names(&svg).contains("[bad name] caf\\u{fffd}\\u{fffd}"));
}

/// Demangled name -> address, and the executable LOAD segment
/// (offset, vaddr, memsz), from binutils.
fn symbols(bin: &Path) -> (Vec<(String, u64)>, (u64, u64, u64)) {
    let nm = Command::new("nm").args(["--defined-only", "-C"]).arg(bin).output().unwrap();
    let syms = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| {
            let (addr, rest) = l.split_once(' ')?;
            let (ty, name) = rest.split_once(' ')?;
            let a = u64::from_str_radix(addr, 16).ok()?;
            matches!(ty, "t" | "T").then(|| (name.to_string(), a))
        })
        .collect();
    let re = Command::new("readelf").args(["-lW"]).arg(bin).output().unwrap();
    let seg = String::from_utf8_lossy(&re.stdout)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|p| p.first() == Some(&"LOAD") && p[6..p.len() - 1].contains(&"E"))
        .map(|p| {
            let h = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
            (h(p[1]), h(p[2]), h(p[5]))
        })
        .expect("executable LOAD segment");
    (syms, seg)
}

/// A function with children beside its own closure (`stage::<[u8; 8]>`
/// and `stage::<[u8; 8]>::{closure#0}`): the closure's name continues the
/// function's with `:`, which sorts before `;`. flame's frame-by-frame
/// order then was not byte order, and inferno stopped with "unsorted
/// input lines detected" (the stackmerge release binary's profile failed
/// so). The addresses are the real program's, named by stacksym from the
/// maps record (the process need not run).
#[test]
fn rust_program_stacks_through_the_pipeline() {
    let dir = scratch("folded-rustnames");
    let bin = util::build_rustnames(&dir);
    let (syms, (off, vaddr, memsz)) = symbols(&bin);
    let addr = |name: &str| syms.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no symbol {name}")).1;
    const BASE: u64 = 0x5555_5555_4000;
    let pid = 4242;
    let mut h = Header::new("test", "0");
    h.pids = vec![pid];
    let maps = Maps {
        pid,
        maps: vec![MapEntry {
            start: BASE + (vaddr & !0xfff),
            end: BASE + ((vaddr + memsz + 0xfff) & !0xfff),
            offset: off & !0xfff,
            path: bin.to_str().unwrap().to_string(),
            build_id: None,
        }],
        names: vec![],
        pgen: None,
    };
    let stack = |frames: &[&str], ns: u64| {
        let mut s = Stack::new(Kind::Off, pid, pid, "rustnames");
        s.state = Some(State::S);
        // Return addresses: one past the call (stacksym looks up addr - 1).
        s.ustack = frames.iter().map(|f| BASE + addr(f) + 1).collect();
        s.ns = ns;
        s.count = 1;
        Record::Stack(s)
    };
    let raw = jsonl(&[
        Record::Header(h),
        Record::Maps(maps),
        stack(&["main::main", "main::stage::<[u8; 8]>", "main::inner"], 3_000_000),
        stack(&["main::main", "main::stage::<[u8; 8]>::{closure#0}"], 2_000_000),
    ]);
    let sym = ok("stacksym", &["--no-live", "-q"], raw.as_bytes());
    let merged = ok("stackmerge", &[], sym.as_bytes());
    let out = run("flame", &[], merged.as_bytes());
    assert!(out.status.success(), "flame failed: {}", String::from_utf8_lossy(&out.stderr));
    let boxes = box_names(&String::from_utf8(out.stdout).unwrap());
    for b in ["main::stage::<[u8; 8]>", "main::stage::<[u8; 8]>::{closure#0}", "main::inner", "main::main"] {
        assert!(boxes.contains(b), "no box {b:?}: {boxes:?}");
    }
    // The folded view: the same names, each time where it was put.
    let folded = ok("stackmerge", &["--folded", "--unit", "ns"], sym.as_bytes());
    let lines: BTreeSet<&str> = folded.lines().collect();
    assert!(lines.contains("rustnames (4242);main::main;main::stage::<[u8%3B 8]>;main::inner;[sleep]_[o] 3000000"), "{folded}");
    assert!(lines.contains("rustnames (4242);main::main;main::stage::<[u8%3B 8]>::{closure#0};[sleep]_[o] 2000000"), "{folded}");
}

/// The same program profiled for real (root: offcputime loads BPF), its
/// stream through `stacksym | stackmerge | flame`: the closure's frame,
/// with `;` and spaces in its name, is drawn.
#[test]
fn rust_program_profiled_end_to_end() {
    if util::skip_without_root("folded_text") {
        return;
    }
    let dir = scratch("folded-rustnames-live");
    let bin = util::build_rustnames(&dir);
    let raw = dir.join("off.raw");
    let st = Command::new(util::bin("offcputime"))
        .arg("-o")
        .arg(&raw)
        .arg("--")
        .arg(&bin)
        .arg("0.6")
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let sym = ok("stacksym", &[raw.to_str().unwrap()], b"");
    let merged = ok("stackmerge", &[], sym.as_bytes());
    let out = run("flame", &[], merged.as_bytes());
    assert!(out.status.success(), "flame failed: {}", String::from_utf8_lossy(&out.stderr));
    let boxes = box_names(&String::from_utf8(out.stdout).unwrap());
    assert!(boxes.contains("main::stage::<[u8; 8]>::{closure#0}"), "{boxes:?}");
    assert!(boxes.contains("main::inner"), "{boxes:?}");
}
