//! Reading a record's address lists (`ustack`, `kstack`) from JSON: into
//! one buffer reused from record to record, then copied at their exact
//! length. serde's own `Vec` starts empty and grows 4, 8, 16...: three
//! allocations and two copies for a 14-address stack, on every one of a
//! stream's records.

use std::cell::RefCell;
use std::fmt;

use serde::de::{Deserializer, SeqAccess, Visitor};

thread_local! {
    static SCRATCH: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// `deserialize_with` of an address list.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
    d.deserialize_seq(Addrs)
}

struct Addrs;

impl<'de> Visitor<'de> for Addrs {
    type Value = Vec<u64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u64>, A::Error> {
        SCRATCH.with_borrow_mut(|buf| {
            buf.clear();
            while let Some(a) = seq.next_element::<u64>()? {
                buf.push(a);
            }
            Ok(buf.to_vec())
        })
    }
}

#[cfg(test)]
mod tests {
    #[derive(serde::Deserialize)]
    struct S {
        #[serde(default, deserialize_with = "super::deserialize")]
        a: Vec<u64>,
    }

    #[test]
    fn lists_read_exactly() {
        let s: S = serde_json::from_str(r#"{"a":[1,18446744073709551615,3]}"#).unwrap();
        assert_eq!((s.a.as_slice(), s.a.capacity()), (&[1, u64::MAX, 3][..], 3));
        let s: S = serde_json::from_str(r#"{"a":[]}"#).unwrap();
        assert!(s.a.is_empty());
        let e = serde_json::from_str::<S>(r#"{"a":[1,-2]}"#).err().unwrap().to_string();
        assert!(e.contains("invalid value"), "{e}");
        assert!(serde_json::from_str::<S>(r#"{"a":5}"#).is_err());
    }
}
