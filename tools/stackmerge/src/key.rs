//! What the merger aggregates on: a stack's identity as a small key.
//!
//! On 1M records of 200k stacks, hashing and comparing keys that owned a
//! thread name and two address vectors each (four allocations, four cache
//! misses per record) was a third of stackmerge's time (oncputime). The
//! thread name is now an id of a small table, the addresses one vector
//! (user then kernel), the rare GPU detail boxed.

use wallclock_stream::fasthash::FastMap;
use wallclock_stream::{GpuInfo, Kind, Stack, State, Waker};

/// GPU activity, device, stream, name.
pub(crate) type GpuKey = (String, Option<u32>, Option<u32>, Option<String>);

/// Identity of a stack for aggregation. `scale` is `Some(freq)` while the
/// value is still a sample count taken at `freq`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub kind: Kind,
    pub state: Option<State>,
    pub pid: u32,
    /// The process's generation under its pid (`Stack::pgen`, 0 absent).
    pub pgen: u32,
    pub tid: u32,
    /// The thread name, as an id of [`Comms`].
    pub comm: u32,
    /// How many of `addrs` are user addresses (the rest are kernel ones).
    pub ulen: u32,
    /// `ustack` then `kstack`.
    pub addrs: Vec<u64>,
    /// The frames (off-CPU leaf included) as a stack of the merger's table;
    /// `None` for no frames.
    pub frames: Option<u32>,
    pub gpu: Option<Box<GpuKey>>,
    pub scale: Option<u64>,
    pub waker: Option<Box<Waker>>,
    /// What an unsymbolized off-CPU stack waited on (a stack with frames
    /// has it as its last frame).
    pub object: Option<String>,
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Agg {
    pub ns: u64,
    pub count: u64,
    pub launch_delay_ns: Option<u64>,
}

impl Agg {
    pub fn add(&mut self, o: Agg) {
        self.ns += o.ns;
        self.count += o.count;
        self.launch_delay_ns = match (self.launch_delay_ns, o.launch_delay_ns) {
            (None, None) => None,
            (x, y) => Some(x.unwrap_or(0) + y.unwrap_or(0)),
        };
    }
}

/// Thread names to ids (a few per process, against a record each).
#[derive(Default)]
pub(crate) struct Comms {
    ids: FastMap<String, u32>,
    names: Vec<String>,
}

impl Comms {
    pub fn id(&mut self, comm: String) -> u32 {
        if let Some(&id) = self.ids.get(comm.as_str()) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(comm.clone());
        self.ids.insert(comm, id);
        id
    }

    pub fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }

    /// Each id's place in the order of the names.
    pub fn ranks(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = (0..self.names.len() as u32).collect();
        ids.sort_unstable_by(|a, b| self.name(*a).cmp(self.name(*b)));
        let mut rank = vec![0u32; ids.len()];
        for (i, id) in ids.into_iter().enumerate() {
            rank[id as usize] = i as u32;
        }
        rank
    }
}

impl Key {
    /// The key of `s` (its frames, `frames`, found by the caller) and its
    /// value. A stack with frames is merged by its frames, as every view of
    /// the merge shows it: its raw addresses are dropped (two call sites in
    /// one function are one stack; stacksym's output keeps the addresses
    /// for naming again). Comparing and hashing them was a sixth of
    /// stackmerge's time on 1M records, and writing them half its output.
    pub fn of(mut s: Stack, frames: Option<u32>, scale: Option<u64>, comms: &mut Comms) -> (Key, Agg) {
        let v = Agg { ns: s.ns, count: s.count, launch_delay_ns: s.gpu.as_ref().and_then(|g| g.launch_delay_ns) };
        if frames.is_some() {
            s.ustack.clear();
            s.kstack.clear();
        }
        let ulen = s.ustack.len() as u32;
        let mut addrs = std::mem::take(&mut s.ustack);
        addrs.extend_from_slice(&s.kstack);
        let key = Key {
            kind: s.kind,
            state: s.state,
            pid: s.pid,
            pgen: wallclock_stream::pgen::pgen_of(s.pgen),
            tid: s.tid,
            comm: comms.id(s.comm),
            ulen,
            addrs,
            frames,
            gpu: s.gpu.map(|g| Box::new((g.activity, g.device, g.stream, g.name))),
            scale,
            waker: s.waker,
            object: s.object,
        };
        (key, v)
    }

    pub fn ustack(&self) -> &[u64] {
        &self.addrs[..self.ulen as usize]
    }

    pub fn kstack(&self) -> &[u64] {
        &self.addrs[self.ulen as usize..]
    }

    /// The stack record of this key and its aggregated value.
    pub fn into_stack(self, v: Agg, comms: &Comms) -> Stack {
        Stack {
            kind: self.kind,
            state: self.state,
            pid: self.pid,
            tid: self.tid,
            comm: comms.name(self.comm).to_string(),
            ustack: self.ustack().to_vec(),
            kstack: self.kstack().to_vec(),
            frames: Vec::new(),
            stack_id: self.frames,
            ns: v.ns,
            count: v.count,
            gpu: self.gpu.map(|g| {
                let (activity, device, stream, name) = *g;
                GpuInfo { activity, device, stream, name, launch_delay_ns: v.launch_delay_ns }
            }),
            waker: self.waker,
            pgen: (self.pgen > 0).then_some(self.pgen),
            object: self.object,
        }
    }
}
