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

use crate::record::{Frame, Record, Stack};

/// The first four bytes of a binary stream.
pub const MAGIC: [u8; 4] = *b"\0WCB";
/// Framing version, the byte after [`MAGIC`].
pub const VERSION: u8 = 3;
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

/// Append `frames`, each bincode-encoded, back to back: the elements of a
/// stack's `frames` for [`encode_stack_spliced`].
pub fn encode_frames(frames: &[Frame], buf: &mut Vec<u8>) -> io::Result<()> {
    for f in frames {
        bincode::encode_into_std_write(f, &mut *buf, config()).map_err(|e| io::Error::other(e.to_string()))?;
    }
    Ok(())
}

/// Append the framed record `Record::Stack(s)` whose `frames` are the `n`
/// frames pre-encoded in `frames` (see [`encode_frames`]), `s.frames`
/// ignored: byte for byte what [`encode_record`] writes for the stack with
/// those frames, without building them (`stacksym` caches encoded frames).
pub fn encode_stack_spliced(s: &Stack, n: usize, frames: &[u8], buf: &mut Vec<u8>) -> io::Result<()> {
    let err = |e: bincode::error::EncodeError| io::Error::other(e.to_string());
    let at = buf.len();
    buf.extend_from_slice(&[0; 4]);
    // The derived encoding: the variant index, then the fields in order.
    const STACK_VARIANT: u32 = 3;
    let head = (STACK_VARIANT, s.kind, s.state, s.pid, s.tid, &s.comm, &s.ustack, &s.kstack, n as u64);
    bincode::encode_into_std_write(head, &mut *buf, config()).map_err(err)?;
    buf.extend_from_slice(frames);
    bincode::encode_into_std_write((s.ns, s.count, &s.gpu), &mut *buf, config()).map_err(err)?;
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

/// Read and check the magic and version.
pub fn read_magic(r: &mut impl BufRead) -> Result<(), String> {
    let mut m = [0u8; 5];
    let n = read_full(r, &mut m).map_err(|e| format!("read error: {e}"))?;
    check_magic(&m[..n])
}

fn check_magic(m: &[u8]) -> Result<(), String> {
    if m.len() < 4 || m[..4] != MAGIC {
        return Err(format!(
            "starts with a NUL byte but not with the binary stream magic \\0WCB (got {:?})",
            String::from_utf8_lossy(m)
        ));
    }
    match m.get(4) {
        None => Err("truncated binary stream magic (no version byte)".into()),
        Some(&v) if v != VERSION => Err(format!(
            "binary framing version {v}, this reader understands {VERSION}; upgrade wallclock or write JSON (WALLCLOCK_STREAM_FORMAT=json)"
        )),
        Some(_) => Ok(()),
    }
}

/// Read the next framed record into `buf` and decode it; `Ok(None)` at the
/// end of the input. A repeated magic between records is skipped. After an
/// error nothing more can be read: the length prefix may be what is wrong.
pub fn read_record(r: &mut impl BufRead, buf: &mut Vec<u8>) -> Result<Option<Record>, String> {
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
            check_magic(&m)?;
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
    match bincode::decode_from_slice::<Record, _>(buf, config()) {
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
        read_magic(&mut r).unwrap();
        let mut buf = Vec::new();
        let mut got = Vec::new();
        while let Some(rec) = read_record(&mut r, &mut buf).unwrap() {
            got.push(rec);
        }
        assert_eq!(got, [recs.clone(), recs].concat());
    }

    #[test]
    fn spliced_stack_is_the_derived_encoding() {
        let mut s = Stack::new(Kind::Gpu, 7, 8, "g");
        s.ustack = vec![1, u64::MAX];
        s.kstack = vec![300];
        s.ns = 1 << 40;
        s.count = 2;
        s.gpu = Some(crate::record::GpuInfo { activity: "kernel".into(), device: Some(1), ..Default::default() });
        let frames = vec![Frame { line: Some(3), inlined: true, ..Frame::named("a") }, Frame::kernel("b")];
        let mut enc = Vec::new();
        encode_frames(&frames, &mut enc).unwrap();
        let mut spliced = Vec::new();
        encode_stack_spliced(&s, frames.len(), &enc, &mut spliced).unwrap();
        s.frames = frames;
        let mut whole = Vec::new();
        encode_record(&Record::Stack(s), &mut whole).unwrap();
        assert_eq!(spliced, whole);
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
}
