//! A process's generation under its pid (`pgen` on `thread`, `maps` and
//! `stack` records): a pid used again within one capture names two
//! processes, and the records say which one.
//!
//! In the binary framing the field is the last of its record, decoded only
//! where the record has bytes left, so that framing 4 (written before it
//! existed) reads as before: the decoders below are the derived ones plus
//! that.

use bincode::de::read::Reader;
use bincode::de::Decoder;
use bincode::error::DecodeError;
use bincode::Decode as De;

use crate::record::{Maps, SliceStack, Stack, Thread};

/// The `pgen` at the end of a record: absent in framing 4.
pub fn trailing_pgen<C, D: Decoder<Context = C>>(d: &mut D) -> Result<Option<u32>, DecodeError> {
    if d.reader().peek_read(1).is_some() {
        De::decode(d)
    } else {
        Ok(None)
    }
}

/// A field after `pgen` at the end of a record (framing 6 and up):
/// absent in older framings.
pub fn trailing_pgen_like<C, D: Decoder<Context = C>, T: De<C>>(d: &mut D) -> Result<Option<T>, DecodeError> {
    if d.reader().peek_read(1).is_some() {
        De::decode(d)
    } else {
        Ok(None)
    }
}

/// How a process is told apart from another of the same pid: `pgen` 0
/// (absent) is the first.
pub fn pgen_of(p: Option<u32>) -> u32 {
    p.unwrap_or(0)
}

/// The suffix that names a later process of a pid in displays: `""` for
/// the first, `" (2nd)"`, `" (3rd)"`, `" (4th)"`... for the ones after.
pub fn pgen_suffix(p: Option<u32>) -> String {
    match pgen_of(p) {
        0 => String::new(),
        g => {
            let n = g + 1;
            let th = match (n % 10, n % 100) {
                (_, 11..=13) => "th",
                (1, _) => "st",
                (2, _) => "nd",
                (3, _) => "rd",
                _ => "th",
            };
            format!(" ({n}{th})")
        }
    }
}

/// One number for a process, for tools that key processes by a u32: the
/// pid, or for a later process of a reused pid the pid with its
/// generation above the pid's 22 bits (a pid is below 4,194,304, the
/// kernel's largest `pid_max`).
pub fn process_key(pid: u32, pgen: Option<u32>) -> u32 {
    match pgen_of(pgen) {
        0 => pid,
        g => pid | g.min(1023) << 22,
    }
}

/// The pid and `pgen` of a [`process_key`].
pub fn split_process_key(k: u32) -> (u32, Option<u32>) {
    let g = k >> 22;
    (k & ((1 << 22) - 1), (g > 0).then_some(g))
}

impl<C> bincode::Decode<C> for Thread {
    fn decode<D: Decoder<Context = C>>(d: &mut D) -> Result<Self, DecodeError> {
        Ok(Thread {
            pid: De::decode(d)?,
            tid: De::decode(d)?,
            comm: De::decode(d)?,
            role: De::decode(d)?,
            start_ns: De::decode(d)?,
            end_ns: De::decode(d)?,
            on_ns: De::decode(d)?,
            steal_ns: De::decode(d)?,
            off_ns: De::decode(d)?,
            samples: De::decode(d)?,
            pgen: trailing_pgen(d)?,
        })
    }
}
bincode::impl_borrow_decode!(Thread);

impl<C> bincode::Decode<C> for Maps {
    fn decode<D: Decoder<Context = C>>(d: &mut D) -> Result<Self, DecodeError> {
        Ok(Maps { pid: De::decode(d)?, maps: De::decode(d)?, names: De::decode(d)?, pgen: trailing_pgen(d)? })
    }
}
bincode::impl_borrow_decode!(Maps);

impl<C> bincode::Decode<C> for Stack {
    fn decode<D: Decoder<Context = C>>(d: &mut D) -> Result<Self, DecodeError> {
        Ok(Stack {
            kind: De::decode(d)?,
            state: De::decode(d)?,
            pid: De::decode(d)?,
            tid: De::decode(d)?,
            comm: De::decode(d)?,
            ustack: De::decode(d)?,
            kstack: De::decode(d)?,
            frames: De::decode(d)?,
            stack_id: De::decode(d)?,
            ns: De::decode(d)?,
            count: De::decode(d)?,
            gpu: De::decode(d)?,
            waker: De::decode(d)?,
            pgen: trailing_pgen(d)?,
            object: trailing_pgen_like(d)?,
        })
    }
}
bincode::impl_borrow_decode!(Stack);

impl<C> bincode::Decode<C> for SliceStack {
    fn decode<D: Decoder<Context = C>>(d: &mut D) -> Result<Self, DecodeError> {
        Ok(SliceStack {
            id: De::decode(d)?,
            pid: De::decode(d)?,
            ustack: De::decode(d)?,
            kstack: De::decode(d)?,
            frames: De::decode(d)?,
            object: trailing_pgen_like(d)?,
        })
    }
}
bincode::impl_borrow_decode!(SliceStack);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::{encode_record, read_magic, read_record};
    use crate::record::{Kind, Record};

    #[test]
    fn suffixes() {
        let got: Vec<String> = [None, Some(0), Some(1), Some(2), Some(3), Some(10), Some(20)].into_iter().map(pgen_suffix).collect();
        assert_eq!(got, ["", "", " (2nd)", " (3rd)", " (4th)", " (11th)", " (21st)"]);
    }

    /// A record with `pgen` round-trips; one without it is the bytes
    /// framing 4 wrote (the field absent at the end), and reads back.
    #[test]
    fn round_trips_and_reads_framing_4() {
        let mut s = Stack::new(Kind::Off, 7, 7, "b");
        s.pgen = Some(1);
        let mut t = Thread::new(7, 7, "b");
        t.pgen = Some(2);
        let m = Maps { pid: 7, maps: vec![], names: vec![], pgen: Some(1) };
        let recs = vec![Record::Stack(s), Record::Thread(t), Record::Maps(m)];
        let mut bytes = crate::binary::magic().to_vec();
        for r in &recs {
            encode_record(r, &mut bytes).unwrap();
        }
        let mut r = &bytes[..];
        let mut v = read_magic(&mut r).unwrap();
        let mut buf = Vec::new();
        let mut got = Vec::new();
        while let Some(rec) = read_record(&mut r, &mut buf, &mut v).unwrap() {
            got.push(rec);
        }
        assert_eq!(got, recs);
        // Framing 4: the same records encoded without the trailing field.
        let mut old = crate::binary::magic().to_vec();
        old[4] = 4;
        let plain = Stack::new(Kind::On, 3, 4, "a");
        let mut one = Vec::new();
        encode_record(&Record::Stack(plain.clone()), &mut one).unwrap();
        // The encoding of None is one zero byte, last: drop it.
        let len = u32::from_le_bytes(one[..4].try_into().unwrap()) - 1;
        old.extend_from_slice(&len.to_le_bytes());
        old.extend_from_slice(&one[4..one.len() - 1]);
        let mut r = &old[..];
        let mut v = read_magic(&mut r).unwrap();
        assert_eq!(read_record(&mut r, &mut buf, &mut v).unwrap(), Some(Record::Stack(plain)));
    }
}
