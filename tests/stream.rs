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
