//! The few pieces of the protobuf wire format that `profile.proto` needs:
//! varints, length-delimited fields and packed repeated integers. Written
//! by hand because a profile is a handful of flat messages; a generated
//! encoder would bring a build-time protoc or a large crate for that.
//!
//! proto3 leaves fields at their default value (0, empty) off the wire,
//! so every `int`/`uint` helper here writes nothing for 0.

/// Wire types (protobuf encoding guide).
const VARINT: u64 = 0;
const LEN: u64 = 2;

/// One message being written.
#[derive(Debug, Default, Clone)]
pub struct Msg {
    pub buf: Vec<u8>,
}

pub fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

impl Msg {
    pub fn new() -> Self {
        Msg::default()
    }

    fn key(&mut self, field: u32, wire: u64) {
        put_varint(&mut self.buf, (u64::from(field) << 3) | wire);
    }

    /// `uint64` (and `bool` as 0/1).
    pub fn uint(&mut self, field: u32, v: u64) -> &mut Self {
        if v != 0 {
            self.key(field, VARINT);
            put_varint(&mut self.buf, v);
        }
        self
    }

    /// `int64`: negative values take ten bytes, as protobuf says (no zigzag).
    pub fn int(&mut self, field: u32, v: i64) -> &mut Self {
        self.uint(field, v as u64)
    }

    pub fn bool(&mut self, field: u32, v: bool) -> &mut Self {
        self.uint(field, u64::from(v))
    }

    /// Bytes, a string or an embedded message: always written, even empty
    /// (the string table's first entry must be there and is "").
    pub fn bytes(&mut self, field: u32, data: &[u8]) -> &mut Self {
        self.key(field, LEN);
        put_varint(&mut self.buf, data.len() as u64);
        self.buf.extend_from_slice(data);
        self
    }

    pub fn msg(&mut self, field: u32, m: &Msg) -> &mut Self {
        self.bytes(field, &m.buf)
    }

    /// A packed `repeated uint64`/`int64` (proto3's default encoding).
    pub fn packed(&mut self, field: u32, vals: impl IntoIterator<Item = u64>) -> &mut Self {
        let mut inner = Vec::new();
        for v in vals {
            put_varint(&mut inner, v);
        }
        if !inner.is_empty() {
            self.bytes(field, &inner);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_as_the_encoding_guide_shows() {
        let mut b = Vec::new();
        put_varint(&mut b, 150);
        assert_eq!(b, [0x96, 0x01]);
        let mut m = Msg::new();
        m.uint(1, 150);
        assert_eq!(m.buf, [0x08, 0x96, 0x01]);
        let mut m = Msg::new();
        m.int(2, -1);
        assert_eq!(m.buf.len(), 11, "a negative int64 is ten bytes after its key");
    }

    #[test]
    fn zero_is_left_out_but_empty_strings_are_not() {
        let mut m = Msg::new();
        m.uint(1, 0).bool(2, false).packed(3, []);
        assert!(m.buf.is_empty());
        m.bytes(6, b"");
        assert_eq!(m.buf, [0x32, 0x00]);
    }

    #[test]
    fn packed_field() {
        let mut m = Msg::new();
        m.packed(1, [3, 270]);
        assert_eq!(m.buf, [0x0a, 0x03, 0x03, 0x8e, 0x02]);
    }
}
