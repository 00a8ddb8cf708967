//! The binary framing of the stream: the same records as the JSON lines,
//! each encoded with bincode 2 (standard configuration: little-endian,
//! variable-length integers) behind a length prefix.
//!
//! ```text
//! 00 57 43 42 VV              magic "\0WCB" and the framing version VV
//! LL LL LL LL <LL bytes>      one record: u32 little-endian length, then
//! LL LL LL LL <LL bytes>      the bincode encoding of a `Record`
//! ...
//! ```
//!
//! A text line never starts with a NUL byte, so one byte tells the two
//! apart. The magic may come again after a record (`cat a.bin b.bin`): as a
//! length it would exceed [`MAX_RECORD`], so it cannot be mistaken for one.
//! bincode is not self-describing: the record types' variants and fields in
//! their order are the encoding, and any change to them bumps [`VERSION`].
//! A reader rejects a framing version it does not know, so keep JSON for
//! archives and use the binary framing between tools of one release.
//!
//! Writers choose the framing with `WALLCLOCK_STREAM_FORMAT`, see
//! [`crate::writer::Format`]; every reader accepts both.

use std::io::{self, BufRead, Read};

use bincode::config::{Configuration, LittleEndian, Limit, Varint};

use crate::record::Record;

/// The first four bytes of a binary stream.
pub const MAGIC: [u8; 4] = *b"\0WCB";
/// Framing version, the byte after [`MAGIC`]. 7 (stream 1.7): the
/// header's `runtime_versions` at its end, after `kernel_lacks`.
pub const VERSION: u8 = 7;
/// The framing of stream 1.6, still read: the header ends at
/// `kernel_lacks`. 6 brought `object` at the end of the `stack` record,
/// after `pgen`.
pub const VERSION_6: u8 = 6;
/// The framing of stream 1.5, still read: `stack` ends at `pgen`. 5
/// brought the `ksyms` record (an appended variant) and `pgen` at the
/// end of the `thread`, `maps` and `stack` records (see [`crate::pgen`]).
pub const VERSION_5: u8 = 5;
/// The framing of stream 1.4, still read: the same records less `ksyms`
/// and with `pgen` absent. 4 brought the header's new fields (see
/// `Header`'s `Decode`) and the `probe` and `span` records (appended
/// variants).
pub const VERSION_4: u8 = 4;
/// The framing of stream 1.3, still read: the same records less 1.4's
/// two, whose header ends before 1.4's fields.
pub const VERSION_3: u8 = 3;
/// Largest record accepted (and written), in bytes.
pub const MAX_RECORD: usize = 1 << 28;

type Config = Configuration<LittleEndian, Varint, Limit<MAX_RECORD>>;

/// bincode's standard configuration, with a limit on what a corrupt length
/// inside a record may make the decoder allocate.
fn config() -> Config {
    bincode::config::standard().with_limit::<MAX_RECORD>()
}

/// Does input starting with `head` use the binary framing? (A text line
/// never starts with NUL; the magic itself is checked when reading.)
pub fn starts_binary(head: &[u8]) -> bool {
    head.first() == Some(&0)
}

/// The magic and version that open a binary stream.
pub fn magic() -> [u8; 5] {
    [MAGIC[0], MAGIC[1], MAGIC[2], MAGIC[3], VERSION]
}

/// Append one framed record (length prefix and encoding) to `buf`.
pub fn encode_record(rec: &Record, buf: &mut Vec<u8>) -> io::Result<()> {
    let at = buf.len();
    buf.extend_from_slice(&[0; 4]);
    bincode::encode_into_std_write(rec, buf, config()).map_err(|e| io::Error::other(e.to_string()))?;
    let len = buf.len() - at - 4;
    if len > MAX_RECORD {
        buf.truncate(at);
        return Err(io::Error::other(format!("record of {len} bytes exceeds the binary framing's {MAX_RECORD}")));
    }
    buf[at..at + 4].copy_from_slice(&(len as u32).to_le_bytes());
    Ok(())
}

/// Read `buf.len()` bytes unless the input ends first; the count read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Read and check the magic; the framing version.
pub fn read_magic(r: &mut impl BufRead) -> Result<u8, String> {
    let mut m = [0u8; 5];
    let n = read_full(r, &mut m).map_err(|e| format!("read error: {e}"))?;
    check_magic(&m[..n])
}

/// The framing version of a magic this reader understands: [`VERSION`],
/// [`VERSION_6`], [`VERSION_5`], [`VERSION_4`], [`VERSION_3`], or [`crate::legacy::VERSION`] (stream 1.2, before the
/// stack table).
fn check_magic(m: &[u8]) -> Result<u8, String> {
    if m.len() < 4 || m[..4] != MAGIC {
        return Err(format!(
            "starts with a NUL byte but not with the binary stream magic \\0WCB (got {:?})",
            String::from_utf8_lossy(m)
        ));
    }
    match m.get(4) {
        None => Err("truncated binary stream magic (no version byte)".into()),
        Some(&v) if v != VERSION && v != VERSION_6 && v != VERSION_5 && v != VERSION_4 && v != VERSION_3 && v != crate::legacy::VERSION => Err(format!(
            "binary framing version {v}, this reader understands {} to {VERSION}; upgrade wallclock or write JSON (WALLCLOCK_STREAM_FORMAT=json)",
            crate::legacy::VERSION
        )),
        Some(&v) => Ok(v),
    }
}

/// Read the next framed record into `buf` and decode it; `Ok(None)` at the
/// end of the input. A repeated magic between records is skipped. After an
/// error nothing more can be read: the length prefix may be what is wrong.
/// `version` is the framing's, from [`read_magic`]; a repeated magic sets it.
pub fn read_record(r: &mut impl BufRead, buf: &mut Vec<u8>, version: &mut u8) -> Result<Option<Record>, String> {
    let fatal = |e: io::Error| format!("read error: {e}");
    let len = loop {
        let mut pre = [0u8; 4];
        match read_full(r, &mut pre).map_err(fatal)? {
            0 => return Ok(None),
            4 => {}
            n => return Err(format!("truncated: the length prefix has {n} of 4 bytes")),
        }
        if pre == MAGIC {
            let mut v = [0u8; 1];
            let n = read_full(r, &mut v).map_err(fatal)?;
            let mut m = pre.to_vec();
            m.extend_from_slice(&v[..n]);
            *version = check_magic(&m)?;
            continue;
        }
        break u32::from_le_bytes(pre) as usize;
    };
    if len > MAX_RECORD {
        return Err(format!("length prefix {len} exceeds the largest record ({MAX_RECORD} bytes): corrupt stream"));
    }
    buf.clear();
    // `take` grows the buffer as bytes come: a corrupt length does not
    // allocate what the input does not hold.
    let got = r.take(len as u64).read_to_end(buf).map_err(fatal)?;
    if got < len {
        return Err(format!("truncated: {got} of the record's {len} bytes"));
    }
    let decoded = if *version == crate::legacy::VERSION {
        bincode::decode_from_slice::<crate::legacy::RecordV2, _>(buf, config()).map(|(r, n)| (r.into(), n))
    } else {
        bincode::decode_from_slice::<Record, _>(buf, config())
    };
    match decoded {
        Ok((rec, used)) if used == len => Ok(Some(rec)),
        Ok((_, used)) => Err(format!("invalid record: {} bytes left after it", len - used)),
        Err(e) => Err(format!("invalid record: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Frame, Header, Kind, Stack, State};

    fn framed(recs: &[Record]) -> Vec<u8> {
        let mut buf = magic().to_vec();
        for r in recs {
            encode_record(r, &mut buf).unwrap();
        }
        buf
    }

    #[test]
    fn round_trip_and_concatenation() {
        let mut s = Stack::new(Kind::Off, 1, 2, "w");
        s.state = Some(State::D);
        s.frames = vec![Frame::named("main"), Frame::kernel("io_schedule")];
        s.ns = 7;
        let recs = vec![Record::Header(Header::new("t", "0")), Record::Stack(s)];
        let mut bytes = framed(&recs);
        bytes.extend(framed(&recs));
        let mut r = &bytes[..];
        let mut v = read_magic(&mut r).unwrap();
        let mut buf = Vec::new();
        let mut got = Vec::new();
        while let Some(rec) = read_record(&mut r, &mut buf, &mut v).unwrap() {
            got.push(rec);
        }
        assert_eq!(got, [recs.clone(), recs].concat());
    }

    #[test]
    fn waker_round_trips() {
        let mut w = crate::record::Waker::new("thread", 7, 9, "worker");
        w.ustack = vec![0x401000, 0x402000];
        w.frames = vec![Frame::named("worker_signal")];
        w.blocked = Some(Box::new(crate::record::WakerBlock {
            state: State::D,
            ustack: vec![5],
            kstack: vec![],
            frames: vec![Frame::kernel("folio_wait_writeback")],
            waker: Some(Box::new(crate::record::Waker::new("softirq", 0, 0, ""))),
        }));
        let mut s = Stack::new(Kind::Off, 7, 8, "req");
        s.state = Some(State::S);
        s.ustack = vec![1, 2];
        s.ns = 99;
        s.waker = Some(Box::new(w));
        let bytes = framed(&[Record::Stack(s.clone())]);
        let mut r = &bytes[..];
        let mut v = read_magic(&mut r).unwrap();
        let got = read_record(&mut r, &mut Vec::new(), &mut v).unwrap().unwrap();
        assert_eq!(got, Record::Stack(s));
    }

    #[test]
    fn magic_is_never_a_length() {
        assert!(u32::from_le_bytes(MAGIC) as usize > MAX_RECORD);
    }

    #[test]
    fn newer_version_rejected() {
        let mut r: &[u8] = b"\0WCB\x09";
        let Err(m) = read_magic(&mut r) else { panic!() };
        assert!(m.contains("version 9"), "{m}");
    }

    /// A header of framing 3 (stream 1.3: none of 1.4's fields, whose
    /// five `None`s are one zero byte each at the end, nor 1.5's
    /// kernel_lacks, an empty list: one more, nor 1.7's
    /// runtime_versions, an empty map: one more) still reads, and so does one
    /// of 1.4 (without kernel_lacks) and one of 1.6 (without
    /// runtime_versions); the later fields round-trip.
    #[test]
    fn header_of_framing_3_reads() {
        let old = Header::new("t", "0");
        let mut bytes = magic().to_vec();
        bytes[4] = VERSION_3;
        encode_record(&Record::Header(old.clone()), &mut bytes).unwrap();
        let len = u32::from_le_bytes(bytes[5..9].try_into().unwrap()) as usize;
        assert!(bytes.ends_with(&[0; 7]));
        bytes.truncate(bytes.len() - 7);
        bytes[5..9].copy_from_slice(&((len - 7) as u32).to_le_bytes());
        let mut new = old.clone();
        (new.prepare, new.activate, new.start_realtime_ns) = (Some("+2s".into()), Some("/5s".into()), Some(7));
        (new.event, new.event_period) = (Some("page-faults".into()), Some(3));
        // 1.4's header: its last field's byte, kernel_lacks's and
        // runtime_versions's not there.
        let mut of_1_4 = Vec::new();
        encode_record(&Record::Header(new.clone()), &mut of_1_4).unwrap();
        let len4 = u32::from_le_bytes(of_1_4[..4].try_into().unwrap()) as usize;
        of_1_4.truncate(of_1_4.len() - 2);
        of_1_4[..4].copy_from_slice(&((len4 - 2) as u32).to_le_bytes());
        bytes.extend(&of_1_4);
        new.kernel_lacks = vec!["sleepable_iter".into(), "attach_cookie".into()];
        // 1.6's header: kernel_lacks last, runtime_versions (an empty
        // map, one byte) not there.
        let mut of_1_6 = Vec::new();
        encode_record(&Record::Header(new.clone()), &mut of_1_6).unwrap();
        let len6 = u32::from_le_bytes(of_1_6[..4].try_into().unwrap()) as usize;
        assert_eq!(of_1_6.last(), Some(&0));
        of_1_6.truncate(of_1_6.len() - 1);
        of_1_6[..4].copy_from_slice(&((len6 - 1) as u32).to_le_bytes());
        bytes.extend(&of_1_6);
        let of_1_6_read = new.clone();
        new.runtime_versions.insert("python".into(), vec!["3.9".into(), "3.10".into()]);
        bytes.extend(framed(&[Record::Header(new.clone())]));
        let mut r = &bytes[..];
        let mut v = read_magic(&mut r).unwrap();
        let mut buf = Vec::new();
        assert_eq!(read_record(&mut r, &mut buf, &mut v).unwrap(), Some(Record::Header(old)));
        let mut without = of_1_6_read.clone();
        without.kernel_lacks.clear();
        assert_eq!(read_record(&mut r, &mut buf, &mut v).unwrap(), Some(Record::Header(without)));
        assert_eq!(read_record(&mut r, &mut buf, &mut v).unwrap(), Some(Record::Header(of_1_6_read)));
        assert_eq!(read_record(&mut r, &mut buf, &mut v).unwrap(), Some(Record::Header(new)));
        assert_eq!(v, VERSION);
    }
}
