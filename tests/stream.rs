//! The stream parser: round trips, and a bounded property run over
//! arbitrary and mutated input that must never panic.

mod util;

use proptest::prelude::*;
use wallclock_stream::{folded, VERSION_MAJOR, VERSION_MINOR, Frame, Header, Kind, Reader, ReaderOptions, Record, Stack, State, Writer};

fn read_str(text: &str) -> Vec<Result<Record, wallclock_stream::ParseError>> {
    Reader::new(text.as_bytes(), "t", ReaderOptions::default()).collect()
}

fn sample_stream() -> String {
    let mut h = Header::new("offcputime", "0.1.0");
    h.pids = vec![42];
    h.start_ns = Some(1_000);
    h.end_ns = Some(2_000_000_000);
    let mut s = Stack::new(Kind::Off, 42, 43, "worker");
    s.state = Some(State::S);
    s.ustack = vec![0x401000, 0x401234];
    s.kstack = vec![0xffffffff81000000];
    s.ns = 5_000_000;
    s.count = 5;
    let mut s2 = Stack::new(Kind::On, 42, 42, "main");
    s2.frames = vec![Frame::named("main"), Frame::named("compute<int>(a, b) & \"x\""), Frame::kernel("do_syscall_64")];
    s2.ns = 20;
    s2.count = 1;
    let mut w = Writer::new(Vec::new());
    for r in [Record::Header(h), Record::Stack(s), Record::Stack(s2), Record::Stats(Default::default())] {
        w.write(&r).unwrap();
    }
    String::from_utf8(w.into_inner()).unwrap()
}

#[test]
fn json_round_trip() {
    let text = sample_stream();
    let recs: Vec<Record> = read_str(&text).into_iter().map(Result::unwrap).collect();
    assert_eq!(recs.len(), 4);
    let mut w = Writer::new(Vec::new());
    for r in &recs {
        w.write(r).unwrap();
    }
    assert_eq!(String::from_utf8(w.into_inner()).unwrap(), text);
}

/// Stream 1.3's stack table: written once per distinct stack, read back
/// into the same records as the frames written in each record (1.2), in
/// JSON and in the binary framing.
#[test]
fn stack_table_reads_as_full_frames() {
    let mut table = wallclock_stream::StackTable::default();
    let a = vec![Frame::named("main"), Frame::named("work"), Frame::kernel("read")];
    let b = vec![Frame::named("main"), Frame::named("other")];
    let mut plain = Vec::new();
    for (i, frames) in [&a, &b, &a, &a].into_iter().enumerate() {
        let mut s = Stack::new(Kind::On, 1, 1 + i as u32, "t");
        s.ustack = vec![0x401000 + i as u64];
        s.ns = 10 + i as u64;
        s.frames = frames.clone();
        plain.push(Record::Stack(s));
    }
    for format in [wallclock_stream::Format::Json, wallclock_stream::Format::Bincode] {
        let mut w = Writer::with_format(Vec::new(), format);
        w.write(&Record::Header(Header::new("t", "0"))).unwrap();
        for r in &plain {
            let Record::Stack(s) = r.clone() else { unreachable!() };
            let id = table.stack_of(&s.frames);
            w.write_stack_in(s, &table, id).unwrap();
        }
        let bytes = w.into_inner();
        let recs: Vec<Record> = Reader::new(&bytes[..], "t", ReaderOptions::default()).map(Result::unwrap).collect();
        assert_eq!(recs[1..], plain[..], "{format}");
        if format == wallclock_stream::Format::Json {
            let text = String::from_utf8(bytes.clone()).unwrap();
            // Each frame named once, each stack defined once.
            assert_eq!(text.matches("\"work\"").count(), 1, "{text}");
            assert_eq!(text.matches("\"type\":\"stackdef\"").count(), 2, "{text}");
            // 1.2 streams, frames in every record, still read the same.
            let mut w = Writer::new(Vec::new());
            for r in &plain {
                w.write(r).unwrap();
            }
            let old = String::from_utf8(w.into_inner()).unwrap();
            assert!(!old.contains("stack_id"));
            let recs: Vec<Record> = read_str(&old).into_iter().map(Result::unwrap).collect();
            assert_eq!(recs, plain);
        }
        // Kept ids: the stack's frames are found in the reader's table.
        let mut r = Reader::new(&bytes[..], "t", ReaderOptions::default()).keep_stack_ids();
        let mut ids = Vec::new();
        while let Some(rec) = r.next() {
            if let Record::Stack(s) = rec.unwrap() {
                assert!(s.frames.is_empty());
                ids.push(s.stack_id.unwrap());
                assert_eq!(r.defs().frames(s.stack_id.unwrap()).unwrap(), if ids.len() == 2 { b.clone() } else { a.clone() });
            }
        }
        assert_eq!((ids[0], ids[2], ids[3]), (ids[0], ids[0], ids[0]));
        assert_ne!(ids[0], ids[1]);
    }
}

/// A stack that names a stack (or a stackdef a frame) not defined before it
/// is a clear error naming the line.
#[test]
fn undefined_stack_id_is_a_clear_error() {
    let h = r#"{"type":"header","format":"wallclock","version":"1.3","tool":"t","tool_version":"0","clock":"monotonic"}"#;
    let text = format!("{h}
{}
", r#"{"type":"stack","kind":"on","pid":1,"tid":1,"stack_id":4,"ns":1,"count":1}"#);
    let e = read_str(&text).remove(1).unwrap_err();
    assert_eq!(e.to_string(), "t: line 2: stack_id 4: no stackdef record before it defines it");
    let text = format!("{h}
{}
", r#"{"type":"stackdef","id":0,"frames":[7]}"#);
    let e = read_str(&text).remove(1).unwrap_err();
    assert_eq!(e.line, 2);
    assert!(e.msg.contains("frame 7"), "{e}");
    let text = format!(
        "{h}
{}
{}
{}
",
        r#"{"type":"frame","id":7,"frame":{"func":"main"}}"#,
        r#"{"type":"stackdef","id":0,"frames":[7]}"#,
        r#"{"type":"stack","kind":"on","stack_id":0,"frames":[{"func":"x"}],"ns":1,"count":1}"#
    );
    let e = read_str(&text).remove(1).unwrap_err();
    assert_eq!(e.line, 4);
    assert!(e.msg.contains("both frames and stack_id"), "{e}");
}

/// The version field as this release writes it.
fn current_version() -> String {
    format!("\"version\":\"{VERSION_MAJOR}.{VERSION_MINOR}\"")
}

#[test]
fn unknown_major_version_is_a_clear_error() {
    let text = sample_stream().replacen(&current_version(), "\"version\":\"7.2\"", 1);
    assert_ne!(text, sample_stream());
    let e = read_str(&text).remove(0).unwrap_err();
    assert_eq!(e.line, 1);
    assert!(e.msg.contains("7.2") && e.msg.contains("newer"), "{e}");
}

#[test]
fn newer_minor_version_is_read() {
    let text = sample_stream().replacen(&current_version(), &format!("\"version\":\"{VERSION_MAJOR}.99\""), 1);
    assert_ne!(text, sample_stream());
    assert!(read_str(&text).iter().all(Result::is_ok));
}

#[test]
fn bcc_folded_files_parse_completely() {
    for rel in ["bcc/offcputime-f-mixed.folded", "bcc/profile-f-mixed.folded"] {
        let Some(p) = util::testdata(rel) else { return };
        let text = std::fs::read_to_string(&p).unwrap();
        let lines = text.lines().filter(|l| !l.trim().is_empty()).count();
        let recs = read_str(&text);
        assert_eq!(recs.len(), lines, "{rel}");
        let total: u64 = recs.iter().map(|r| match r {
            Ok(Record::Stack(s)) => s.count,
            other => panic!("{rel}: {other:?}"),
        }).sum();
        let expect: u64 = text.lines().filter_map(|l| l.rsplit_once(' ')).map(|(_, v)| v.trim().parse::<u64>().unwrap()).sum();
        assert_eq!(total, expect, "{rel}");
    }
}

fn arb_frame() -> impl Strategy<Value = Frame> {
    ("[a-zA-Z_<>&\" :]{1,12}", any::<bool>(), any::<bool>()).prop_map(|(f, k, i)| Frame {
        kernel: k,
        inlined: i && !k,
        ..Frame::named(f.trim().to_string() + "x")
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    // Any bytes at all: the reader returns records or line-numbered errors.
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..400)) {
        let n_lines = data.split(|b| *b == b'\n').count();
        for r in Reader::new(&data[..], "fuzz", ReaderOptions::default()) {
            if let Err(e) = r {
                prop_assert!(e.line >= 1 && e.line <= n_lines);
            }
        }
    }

    // A valid stream with bytes flipped, cut or duplicated: no panic.
    #[test]
    fn mutated_stream_never_panics(pos in 0usize..600, byte in any::<u8>(), cut in 0usize..600) {
        let mut data = sample_stream().into_bytes();
        let p = pos % data.len();
        data[p] = byte;
        data.truncate(cut.max(1).min(data.len()));
        for r in Reader::new(&data[..], "fuzz", ReaderOptions::default()) {
            let _ = r;
        }
    }

    // Folded lines we write read back as the same frames, kind and value.
    #[test]
    fn folded_round_trip(frames in proptest::collection::vec(arb_frame(), 1..8), kind in 0u8..3, v in 0u64..u64::MAX / 1000) {
        let kind = [Kind::On, Kind::Off, Kind::Gpu][kind as usize];
        let mut out = Vec::new();
        folded::write_line(&mut out, &[], &frames, kind, v).unwrap();
        let line = String::from_utf8(out).unwrap();
        let s = folded::parse_line(&line, 1000).unwrap();
        prop_assert_eq!(s.kind, kind);
        prop_assert_eq!(s.count, v);
        prop_assert_eq!(s.frames.len(), frames.len());
        for (a, b) in s.frames.iter().zip(&frames) {
            prop_assert_eq!(&a.func, &b.func);
            prop_assert_eq!(a.kernel, b.kernel);
        }
    }
}
