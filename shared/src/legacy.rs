//! Binary framing version 2 (stream 1.2), still read: the records before
//! the stack table, whose stack records have no `stack_id`. bincode's
//! encoding is the types' fields in order, so the old layout is kept here
//! as types of its own and turned into today's records.

use bincode::Decode;

use crate::record::{Frame, GpuInfo, Header, Kind, MapEntry, Maps, Record, Stack, State, Stats, Thread};

/// The framing version these types decode.
pub const VERSION: u8 = 2;

#[derive(Decode)]
#[cfg_attr(test, derive(bincode::Encode))]
pub enum RecordV2 {
    Header(Header),
    Thread(Thread),
    Maps(MapsV2),
    Stack(StackV2),
    Stats(Stats),
}

#[derive(Decode)]
#[cfg_attr(test, derive(bincode::Encode))]
pub struct MapsV2 {
    pid: u32,
    maps: Vec<MapEntry>,
}

#[derive(Decode)]
#[cfg_attr(test, derive(bincode::Encode))]
pub struct StackV2 {
    kind: Kind,
    state: Option<State>,
    pid: u32,
    tid: u32,
    comm: String,
    ustack: Vec<u64>,
    kstack: Vec<u64>,
    frames: Vec<Frame>,
    ns: u64,
    count: u64,
    gpu: Option<GpuInfo>,
}

impl From<RecordV2> for Record {
    fn from(r: RecordV2) -> Record {
        match r {
            RecordV2::Header(h) => Record::Header(h),
            RecordV2::Thread(t) => Record::Thread(t),
            RecordV2::Maps(m) => Record::Maps(Maps { pid: m.pid, maps: m.maps, names: Vec::new(), pgen: None }),
            RecordV2::Stats(s) => Record::Stats(s),
            RecordV2::Stack(s) => Record::Stack(Stack {
                kind: s.kind,
                state: s.state,
                pid: s.pid,
                tid: s.tid,
                comm: s.comm,
                ustack: s.ustack,
                kstack: s.kstack,
                frames: s.frames,
                stack_id: None,
                ns: s.ns,
                count: s.count,
                gpu: s.gpu,
                waker: None,
                pgen: None,
                object: None,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Reader, ReaderOptions};

    /// A binary stream written by 1.2's tools (framing 2, frames in the
    /// stack record, maps without names) reads as the same records.
    #[test]
    fn framing_2_still_read() {
        let frames = vec![Frame::named("main"), Frame::kernel("read")];
        let old = StackV2 {
            kind: Kind::Off,
            state: Some(State::S),
            pid: 1,
            tid: 2,
            comm: "w".into(),
            ustack: vec![7],
            kstack: vec![],
            frames: frames.clone(),
            ns: 5,
            count: 1,
            gpu: None,
        };
        let mut bytes = b"\0WCB\x02".to_vec();
        let maps = RecordV2::Maps(MapsV2 { pid: 1, maps: vec![] });
        for r in [RecordV2::Header(Header::new("t", "0")), maps, RecordV2::Stack(old)] {
            let enc = bincode::encode_to_vec(r, bincode::config::standard()).unwrap();
            bytes.extend_from_slice(&(enc.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&enc);
        }
        let recs: Vec<Record> = Reader::new(&bytes[..], "t", ReaderOptions::default()).map(Result::unwrap).collect();
        let mut want = Stack::new(Kind::Off, 1, 2, "w");
        (want.state, want.ustack, want.frames, want.ns, want.count) = (Some(State::S), vec![7], frames, 5, 1);
        assert_eq!(recs[1], Record::Maps(Maps { pid: 1, maps: vec![], names: vec![], pgen: None }));
        assert_eq!(recs[2], Record::Stack(want));
    }
}
