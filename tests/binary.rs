//! The binary framing of the stream (WALLCLOCK_STREAM_FORMAT=bincode): the
//! tools write the same records in it as in JSON, every reader takes it, and
//! a broken binary stream gives one line naming the record, never a panic.

mod util;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use proptest::prelude::*;
use util::{bin, run_cmd, scratch};
use wallclock_stream::binary::MAGIC;
use wallclock_stream::{Format, Reader, ReaderOptions, Record, Writer};

/// Run a built tool with `WALLCLOCK_STREAM_FORMAT=format`.
fn tool(name: &str, format: &str, args: &[&str], stdin: &[u8]) -> Output {
    run_cmd(Command::new(bin(name)).env("WALLCLOCK_STREAM_FORMAT", format).args(args), stdin)
}

fn ok(name: &str, format: &str, args: &[&str], stdin: &[u8]) -> Vec<u8> {
    let out = tool(name, format, args, stdin);
    assert!(out.status.success(), "{name} {args:?} ({format}): {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn records(data: &[u8]) -> Vec<Record> {
    Reader::new(data, "t", ReaderOptions::default()).map(|r| r.expect("a valid stream")).collect()
}

fn is_binary(data: &[u8]) -> bool {
    data.starts_with(&MAGIC)
}

/// Extra records that use every optional field, in the JSON the stream's
/// writer writes (so that JSON -> records -> JSON is the identity).
const EXTRA: &str = r#"{"type":"thread","pid":4242,"tid":4300,"comm":"gpu feeder","role":"worker","start_ns":5,"end_ns":9000000000,"on_ns":1200,"off_ns":{"R":1,"S":2,"D":3,"other":4},"samples":7}
{"type":"maps","pid":4243,"maps":[{"start":4096,"end":8192,"offset":0,"path":"/opt/lib \"odd\".so","build_id":"00ff"}],"names":[{"addr":18442240474082181136,"frame":{"func":"py::run:/a.py","file":"/a.py","line":3}}]}
{"type":"stack","kind":"gpu","pid":4242,"tid":4300,"comm":"gpu feeder","frames":[{"func":"main","module":"app","file":"/src/a.cc","line":4},{"func":"inl<T>","inlined":true},{"func":"jitted","jit":true},{"func":"do_syscall_64","module":"[kernel]","kernel":true}],"ns":5000,"count":2,"gpu":{"activity":"kernel","device":0,"stream":7,"launch_delay_ns":300,"name":"void k<float>(float*)"}}
{"type":"stack","kind":"off","state":"other","pid":4242,"tid":4300,"comm":"gpu feeder","frames":[{"func":"[short blocks]"}],"ns":0,"count":0}
{"type":"stats","end_ns":10000000000,"counts":{"lost_stacks":1,"short_blocks":3}}
"#;

/// A raw stream (addresses into a real ELF, as `bench-gen` writes it for the
/// benchmark) with a full header first and every record type after it.
fn raw_stream(dir: &Path) -> PathBuf {
    let elf = dir.join("elf");
    std::fs::copy(bin("stackmerge"), &elf).unwrap();
    let gen = dir.join("gen.json");
    let st = Command::new("python3")
        .arg(util::root().join("scripts/bench-gen"))
        .args(["stream", gen.to_str().unwrap(), "--binary", elf.to_str().unwrap(), "--lines", "3000", "--stacks", "400"])
        .status()
        .expect("python3 runs scripts/bench-gen");
    assert!(st.success(), "bench-gen failed");
    let gen = std::fs::read_to_string(&gen).unwrap();
    let header = r#"{"type":"header","format":"wallclock","version":"1.0","tool":"offcputime","tool_version":"0.1.0","pids":[4242],"command":["app","--flag"],"clock":"monotonic","start_ns":0,"end_ns":10000000000,"freq_hz":49,"min_block_ns":1000,"lost":{"ringbuf_drops":2}}"#;
    let body = gen.split_once('\n').unwrap().1;
    let p = dir.join("raw.json");
    std::fs::write(&p, format!("{header}\n{body}{EXTRA}")).unwrap();
    p
}

/// Every record as written, the stack table's definitions included (a
/// reader resolves them into the stacks).
fn raw_records(data: &[u8]) -> Vec<Record> {
    if !is_binary(data) {
        return data.split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect();
    }
    let mut r = data;
    let mut version = wallclock_stream::binary::read_magic(&mut r).unwrap();
    let (mut buf, mut out) = (Vec::new(), Vec::new());
    while let Some(rec) = wallclock_stream::binary::read_record(&mut r, &mut buf, &mut version).unwrap() {
        out.push(rec);
    }
    out
}

/// JSON lines -> records -> bincode -> records -> JSON lines, in process,
/// record for record (the stack table's definitions too).
fn via_bincode(json: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut w = Writer::with_format(Vec::new(), Format::Bincode);
    for r in raw_records(json) {
        w.write(&r).unwrap();
    }
    let binary = w.into_inner();
    let mut back = Writer::new(Vec::new());
    for r in raw_records(&binary) {
        back.write(&r).unwrap();
    }
    (binary, back.into_inner())
}

#[test]
fn every_record_type_round_trips_through_bincode() {
    let d = scratch("binary-records");
    let raw = std::fs::read(raw_stream(&d)).unwrap();
    // Real tool output with every record type, JSON written by our writer.
    let sym = ok("stacksym", "json", &["--no-live", "-q"], &raw);
    let merged = ok("stackmerge", "json", &[], &sym);
    for (what, json) in [("stacksym", &sym), ("stackmerge", &merged), ("extra", &EXTRA.as_bytes().to_vec())] {
        let types: std::collections::BTreeSet<&str> = std::str::from_utf8(json)
            .unwrap()
            .lines()
            .map(|l| l.split('"').nth(3).unwrap())
            .collect();
        if what == "stacksym" {
            assert_eq!(types.into_iter().collect::<Vec<_>>(), ["frame", "header", "maps", "stack", "stackdef", "stats", "thread"]);
        }
        let (binary, back) = via_bincode(json);
        assert!(is_binary(&binary));
        assert!(binary.len() < json.len(), "{what}: bincode {} bytes, JSON {}", binary.len(), json.len());
        assert!(back == *json, "{what}: JSON -> bincode -> JSON changed the bytes");
    }
}

#[test]
fn stacksym_and_stackmerge_write_the_same_records_in_bincode() {
    let d = scratch("binary-tools");
    let raw_path = raw_stream(&d);
    let raw = std::fs::read(&raw_path).unwrap();
    let sym_json = ok("stacksym", "json", &["--no-live", "-q"], &raw);
    let sym_bin = ok("stacksym", "bincode", &["--no-live", "-q"], &raw);
    assert!(is_binary(&sym_bin) && !is_binary(&sym_json));
    assert!(records(&sym_json).iter().any(|r| matches!(r, Record::Stack(s) if s.frames.len() > 2)), "symbolized");
    assert_eq!(records(&sym_bin), records(&sym_json));
    // Read back by the tool, written as JSON: byte for byte the direct run
    // (symbolized stacks pass through stacksym unchanged).
    assert!(ok("stacksym", "json", &["--no-live", "-q"], &sym_bin) == sym_json, "stacksym bincode -> JSON differs");
    // A binary raw input (as a capture tool writes it) symbolizes the same.
    let (raw_bin, _) = via_bincode(&raw);
    assert!(ok("stacksym", "json", &["--no-live", "-q"], &raw_bin) == sym_json, "stacksym of a binary raw stream differs");

    let merged_json = ok("stackmerge", "json", &[], &sym_json);
    let merged_bin = ok("stackmerge", "bincode", &[], &sym_json);
    assert!(is_binary(&merged_bin));
    assert!(ok("stackmerge", "json", &[], &merged_bin) == merged_json, "stackmerge bincode -> JSON differs");
    assert!(ok("stackmerge", "json", &[], &sym_bin) == merged_json, "stackmerge of binary input differs");
    let folded_json = ok("stackmerge", "json", &["--folded"], &sym_json);
    assert!(!folded_json.is_empty());
    assert!(ok("stackmerge", "bincode", &["--folded"], &sym_bin) == folded_json, "--folded is text in either format");

    // One binary and one JSON file given to one tool.
    let (fj, fb) = (d.join("sym.json"), d.join("sym.bin"));
    std::fs::write(&fj, &sym_json).unwrap();
    std::fs::write(&fb, &sym_bin).unwrap();
    let (fj, fb) = (fj.to_str().unwrap(), fb.to_str().unwrap());
    let both_json = ok("stackmerge", "json", &[fj, "--on", fj], b"");
    assert!(ok("stackmerge", "json", &[fb, "--on", fj], b"") == both_json);
    assert!(ok("stackmerge", "json", &[fj, "--on", fb], b"") == both_json);
}

#[test]
fn flame_and_wcreport_read_bincode_as_json() {
    let d = scratch("binary-readers");
    let raw = std::fs::read(raw_stream(&d)).unwrap();
    let merged_json = ok("stackmerge", "json", &[], &ok("stacksym", "json", &["--no-live", "-q"], &raw));
    let merged_bin = ok("stackmerge", "bincode", &[], &merged_json);
    assert!(is_binary(&merged_bin));
    let (fj, fb) = (d.join("m.json"), d.join("m.bin"));
    std::fs::write(&fj, &merged_json).unwrap();
    std::fs::write(&fb, &merged_bin).unwrap();
    let (fj, fb) = (fj.to_str().unwrap(), fb.to_str().unwrap());
    for (name, args) in [("flame", vec![]), ("flame", vec!["--inverted"]), ("wcreport", vec![]), ("wcreport", vec!["--json"])] {
        let from_json = ok(name, "json", &args, &merged_json);
        assert!(from_json.len() > 100, "{name} {args:?} wrote little");
        assert!(ok(name, "json", &args, &merged_bin) == from_json, "{name} {args:?}: stdin bincode differs from JSON");
        let mut a = args.clone();
        a.push(fb);
        assert!(ok(name, "json", &a, b"") == from_json, "{name} {args:?}: file bincode differs from JSON");
    }
    // Two files, one of each framing, read as one profile.
    assert!(ok("flame", "json", &[fb, fj], b"") == ok("flame", "json", &[fj, fj], b""));
}

#[test]
fn unknown_format_is_one_line_error() {
    let out = tool("stackmerge", "xml", &[], b"a;b 1\n");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("WALLCLOCK_STREAM_FORMAT") && err.contains("xml"), "{err}");
}

/// A small binary stream and the byte offset where each record starts.
fn sample_binary() -> (Vec<u8>, Vec<usize>) {
    let json = format!(
        "{}\n{EXTRA}",
        r#"{"type":"header","format":"wallclock","version":"1.0","tool":"t","tool_version":"0","clock":"monotonic"}"#
    );
    let (binary, _) = via_bincode(json.as_bytes());
    let mut starts = Vec::new();
    let mut at = 5;
    while at < binary.len() {
        starts.push(at);
        at += 4 + u32::from_le_bytes(binary[at..at + 4].try_into().unwrap()) as usize;
    }
    (binary, starts)
}

#[test]
fn truncated_binary_names_the_record_in_one_line() {
    let (binary, starts) = sample_binary();
    assert_eq!(starts.len(), 6);
    // Cut inside record 4: three records read, then "record 4".
    let cut = &binary[..starts[3] + 6];
    for name in ["stackmerge", "wcreport", "flame", "stacksym"] {
        let out = tool(name, "json", &[], cut);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.contains("<stdin>: record 4: truncated"), "{name}: {err}");
    }
    // stacksym wrote what came before the bad record.
    let out = tool("stacksym", "json", &[], cut);
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
    // A bad magic is named too.
    let out = tool("flame", "json", &[], b"\0WCX\x01rest");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("record 1") && err.contains("magic"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    // A binary stream flipped, cut or with its length prefixes changed: the
    // reader gives records, then an error naming the record it was reading,
    // and stops; never a panic. A record whose framing held but whose stack
    // table reference does not (a flipped byte that gives a stack both
    // frames and a stack_id) is named as a bad text line is, and the
    // records after it, framed soundly, are read.
    #[test]
    fn mutated_binary_never_panics(pos in 0usize..2000, byte in any::<u8>(), cut in 0usize..2000, prefix in any::<bool>()) {
        let (mut data, starts) = sample_binary();
        let p = if prefix { starts[pos % starts.len()] + pos % 4 } else { pos % data.len() };
        // A first byte other than NUL makes it text, tested in tests/stream.rs.
        prop_assume!(p != 0 || byte == 0);
        data[p] = byte;
        data.truncate(cut.max(1).min(data.len()));
        let mut failed = None;
        for (i, r) in Reader::new(&data[..], "fuzz", ReaderOptions::default()).enumerate() {
            prop_assert!(failed.is_none(), "an item after the framing error {:?}", failed);
            let n = i + 1;
            if let Err(e) = r {
                let table = e.msg.contains("stack_id") || e.msg.starts_with("stackdef ");
                failed = (!table).then(|| e.to_string());
                prop_assert!(e.binary, "{e}");
                prop_assert_eq!(e.line, n, "{}", e);
                let msg = e.to_string();
                prop_assert!(msg.starts_with(&format!("fuzz: record {}: ", e.line)) && !msg.contains('\n'), "{msg}");
            }
        }
    }
}
