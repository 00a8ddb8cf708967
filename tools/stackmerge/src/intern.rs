//! Stacks as ids: the merger's table of every distinct stack of frames
//! (keys hold an id, not a list of frames), each input's stack table ids
//! mapped to it, and the kind's leaf frame appended once.

use std::borrow::Cow;

use wallclock_stream::accounting::kind_leaf;
use wallclock_stream::fasthash::FastMap;
use wallclock_stream::idmap::IdMap;
use wallclock_stream::{Defs, Frame, Kind, Stack, StackTable};

use crate::key::Agg;
use crate::named::{Named, NamedAgg};

/// The merger's stacks.
#[derive(Default)]
pub(crate) struct Interned {
    pub table: StackTable,
    /// (stack without leaf or u32::MAX, leaf frame) -> stack with the leaf.
    leafed: FastMap<(u32, u32), u32>,
    /// Leaf name -> its frame in `table`.
    leaf_ids: FastMap<String, u32>,
}

/// Of an input's stack (see [`InputIds`]): the [`leaf_code`] of the last
/// record made of it and that record's stack in the table. Records of one
/// stack mostly come with one leaf, and this needs neither the stack's
/// frames nor its leaf's name (a fifth of stackmerge's time on 1M
/// records); kept beside the input's id mapping, one lookup finds both.
pub(crate) type Memo = Option<(u8, u32)>;

/// What decides a stack's leaf frame, as a number, where it is not a name
/// to look at (`None`: a GPU activity's name).
fn leaf_code(s: &Stack) -> Option<u8> {
    match (s.kind, s.state) {
        (Kind::Off, Some(st)) => Some(st as u8),
        (Kind::Gpu, _) => None,
        _ => Some(u8::MAX),
    }
}

impl Interned {
    /// The id of the frames of `s` (those of table stack `base` when
    /// given; `s.frames` is taken), with the kind's leaf frame appended
    /// once (a re-merge does not add a second); `None` for no frames.
    /// Unsymbolized stacks keep their addresses for a later `stacksym`;
    /// their leaf is added when they are written folded.
    pub fn frames(&mut self, s: &mut Stack, base: Option<u32>, memo: Option<&mut Memo>) -> Option<u32> {
        if s.kind == Kind::Off && s.object.is_some() {
            // Its object's frame after the leaf (the memo knows leaves only).
            let id = self.frames_of(s, base)?;
            let obj = s.object.take().unwrap_or_default();
            let t = &mut self.table;
            let mut ids = t.stack(id).to_vec();
            let funcs: Vec<&str> = ids.iter().map(|&f| t.frame(f).func.as_str()).collect();
            if wallclock_stream::accounting::object_of(&funcs).is_none() {
                ids.push(t.frame_id(&Frame::named(wallclock_stream::accounting::object_frame(&obj))));
            }
            return Some(t.stack_id(&ids));
        }
        let code = leaf_code(s);
        if let (Some(b), Some(code), Some(memo)) = (base, code, memo) {
            if let Some((c, id)) = *memo {
                if c == code {
                    return Some(id);
                }
            }
            let id = self.frames_of(s, base);
            // Only a stack with frames: an empty one leaves the record's
            // addresses to decide.
            if let Some(id) = id.filter(|_| !self.table.stack(b).is_empty()) {
                *memo = Some((code, id));
            }
            return id;
        }
        self.frames_of(s, base)
    }

    fn frames_of(&mut self, s: &mut Stack, base: Option<u32>) -> Option<u32> {
        let t = &mut self.table;
        let base = match base {
            Some(id) => Some(id),
            None if s.frames.is_empty() => None,
            None => Some(t.stack_of(&std::mem::take(&mut s.frames))),
        }
        .filter(|&id| !t.stack(id).is_empty());
        let raw = base.is_none() && !(s.ustack.is_empty() && s.kstack.is_empty());
        // The off-CPU leaf without a String per record.
        let leaf: Option<Cow<'static, str>> = match (s.kind, s.state) {
            (Kind::Off, Some(st)) => Some(Cow::Borrowed(st.leaf_name())),
            _ => kind_leaf(s).map(Cow::Owned),
        };
        let frames = match leaf {
            Some(leaf) if !raw => {
                // A re-merge: the leaf is there, maybe its object's frame after it.
                let ends_in_leaf = base.is_some_and(|b| {
                    let st = t.stack(b);
                    let tail: Vec<&str> = st[st.len().saturating_sub(2)..].iter().map(|&f| t.frame(f).func.as_str()).collect();
                    tail.last() == Some(&leaf.as_ref()) || (wallclock_stream::accounting::object_of(&tail).is_some() && tail[0] == leaf)
                });
                if ends_in_leaf {
                    base
                } else {
                    let leaf = match self.leaf_ids.get(leaf.as_ref()) {
                        Some(&id) => id,
                        None => {
                            let id = t.frame_id(&Frame::named(leaf.as_ref()));
                            self.leaf_ids.insert(leaf.into_owned(), id);
                            id
                        }
                    };
                    let b = base.unwrap_or(u32::MAX);
                    Some(match self.leafed.get(&(b, leaf)) {
                        Some(&id) => id,
                        None => {
                            let mut ids = base.map(|b| t.stack(b).to_vec()).unwrap_or_default();
                            ids.push(leaf);
                            let id = t.stack_id(&ids);
                            self.leafed.insert((b, leaf), id);
                            id
                        }
                    })
                }
            }
            _ => base,
        };
        frames
    }
}

impl Interned {
    /// The table's stacks of one frame named `func` (a few at most).
    pub fn single_frame_stacks(&self, func: &str) -> Vec<u32> {
        let t = &self.table;
        (0..t.frame_count() as u32).filter(|&f| t.frame(f).func == func).filter_map(|f| t.find_stack(&[f])).collect()
    }
}

/// One input's stack table ids mapped to the merger's, each with its
/// [`Memo`] and the sums of its last key.
#[derive(Default)]
pub(crate) struct InputIds {
    generation: u64,
    stacks: IdMap<InputStack>,
    frames: IdMap<u32>,
    /// The input ids whose `last` is set (each once).
    pub pending: Vec<u32>,
}

/// What the merger knows of one input stack id.
pub(crate) struct InputStack {
    /// The merger's table id of its frames.
    pub id: u32,
    pub memo: Memo,
    /// The key of its last record and its slot in the
    /// [`crate::named::NamedAgg`]; the records of that key since, summed
    /// here (`ns`, `count`) rather than in the slot: the slot is one more
    /// place in memory to wait for per record.
    pub last: Option<(Named, u32)>,
    pub ns: u64,
    pub count: u64,
}

impl InputStack {
    /// Add what is summed here to the last key's slot.
    pub fn settle(&mut self, named: &mut NamedAgg) {
        if let Some((_, slot)) = self.last {
            let v = Agg { ns: std::mem::take(&mut self.ns), count: std::mem::take(&mut self.count), launch_delay_ns: None };
            named.items[slot as usize].1.add(v);
        }
    }
}

impl InputIds {
    /// The merger's id of the input's stack `id` (defined: the reader
    /// checked), its memo and last key. Ids defined again: what was
    /// learnt of them is settled into `named` and forgotten.
    pub fn stack(&mut self, id: u32, defs: &Defs, table: &mut StackTable, named: &mut NamedAgg) -> &mut InputStack {
        if self.generation != defs.generation() {
            self.flush(named);
            *self = InputIds { generation: defs.generation(), ..InputIds::default() };
        }
        if self.stacks.contains(id) {
            return self.stacks.get_mut(id).expect("just checked");
        }
        let frames = defs.stack(id).unwrap_or_default();
        let ids: Vec<u32> = frames
            .iter()
            .map(|&f| match self.frames.get(f) {
                Some(&g) => g,
                None => {
                    let g = table.frame_id(defs.frame(f).expect("the reader checks stackdefs"));
                    self.frames.insert(f, g);
                    g
                }
            })
            .collect();
        let g = table.stack_id(&ids);
        self.stacks.insert(id, InputStack { id: g, memo: None, last: None, ns: 0, count: 0 });
        self.stacks.get_mut(id).expect("just inserted")
    }

    /// Settle every stack's sums into `named` (the input ends, or its ids
    /// are defined again), in the order the stacks came.
    pub fn flush(&mut self, named: &mut NamedAgg) {
        for id in std::mem::take(&mut self.pending) {
            if let Some(e) = self.stacks.get_mut(id) {
                e.settle(named);
                e.last = None;
            }
        }
    }
}
