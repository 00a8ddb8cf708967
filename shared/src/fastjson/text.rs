//! The text of stack records' address lists as they were read, kept to
//! be written back as is ([`super::write_stack_lists`]) by a tool that
//! writes each record again with the same addresses (stacksym).

use super::ListSpans;

/// The address lists of the records a [`crate::Reader`] returned since
/// [`AddrText::clear`], one entry per record, in order.
#[derive(Debug, Default)]
pub struct AddrText {
    bytes: Vec<u8>,
    /// Per record: where its `ustack` text starts, where its `kstack` text
    /// starts (the `ustack` text's end) and ends, in `bytes`; `None` for a
    /// record not read by hand (its lists are written digit by digit).
    records: Vec<Option<[usize; 3]>>,
    /// The lists of the record being read, until it is returned.
    staged: Option<[usize; 3]>,
    /// The end of the text of the records returned.
    committed: usize,
}

impl AddrText {
    /// Keep the lists at `spans` of `b`, the text of the record being read.
    pub(crate) fn stage(&mut self, b: &[u8], spans: &ListSpans) {
        // Whatever an earlier record that was not returned left.
        self.bytes.truncate(self.committed);
        let start = self.bytes.len();
        self.bytes.extend_from_slice(&b[spans.ustack.clone()]);
        let mid = self.bytes.len();
        self.bytes.extend_from_slice(&b[spans.kstack.clone()]);
        self.staged = Some([start, mid, self.bytes.len()]);
    }

    /// A record is to be read: nothing of it is staged yet.
    pub(crate) fn unstage(&mut self) {
        self.staged = None;
    }

    /// The record being read is returned: its entry (`None` unless staged).
    pub(crate) fn commit(&mut self) {
        let staged = self.staged.take();
        if let Some([_, _, end]) = staged {
            self.committed = end;
        }
        self.records.push(staged);
    }

    /// The text of the `ustack` and `kstack` lists of the `i`th record
    /// (empty where it had none), if it was read by hand.
    pub fn get(&self, i: usize) -> Option<(&[u8], &[u8])> {
        let [start, mid, end] = (*self.records.get(i)?)?;
        Some((&self.bytes[start..mid], &self.bytes[mid..end]))
    }

    /// Forget every record's text (the next record returned is the 0th).
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.records.clear();
        self.staged = None;
        self.committed = 0;
    }
}
