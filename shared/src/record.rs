//! Record types of the stream. Field order here is the order on the wire,
//! in JSON and in the binary framing, where the variants and fields in
//! their order *are* the encoding: any change to them (a new optional field
//! too) must bump [`crate::binary::VERSION`].

use std::collections::BTreeMap;

use bincode::{Decode, Encode};
use serde::{Deserialize, Serialize};

pub use crate::state::{State, StateNs};

/// The value of `Header::format`.
pub const FORMAT_NAME: &str = "wallclock";
/// Major version: a reader rejects a stream with a larger one.
pub const VERSION_MAJOR: u32 = 1;
/// Minor version: additions only (new optional fields, new count names).
pub const VERSION_MINOR: u32 = 7;

/// Count-name prefixes of what a symbolizer could not name, per module:
/// distinct addresses, time (ns) and events of the stacks holding at least
/// one such frame (a stack counted once per module). The module is
/// `Frame::module`'s, `[unknown]` for addresses in no known mapping.
pub const UNNAMED_ADDRS: &str = "unnamed_addrs:";
pub const UNNAMED_NS: &str = "unnamed_ns:";
pub const UNNAMED_COUNT: &str = "unnamed_count:";

/// One line of the stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Encode, Decode)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Record {
    Header(Header),
    Thread(Thread),
    Maps(Maps),
    Stack(Stack),
    Stats(Stats),
    /// 1.3: one frame of the stack table (see [`crate::table`]).
    Frame(FrameDef),
    /// 1.3: one stack of the stack table, as frame ids.
    StackDef(StackDef),
    /// 1.3, with `--timeline`: one interval of one thread (see [`Slice`]).
    Slice(Slice),
    /// 1.3: a stack the `slice` records name by id (see [`SliceStack`]).
    #[serde(rename = "slice_stack")]
    SliceStack(SliceStack),
    /// 1.4, with `--probe`: one firing of a user probe (see [`crate::ProbeEvent`]).
    Probe(crate::probe::ProbeEvent),
    /// 1.4, with span probes: an entry and its exit on one thread (see [`crate::Span`]).
    Span(crate::probe::Span),
    /// 1.5: kernel symbols of code loaded only during the capture (its
    /// own BPF programs among them), see [`crate::Ksyms`].
    Ksyms(crate::ksyms::Ksyms),
}

/// First record: makes the stream self-describing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Encode)]
pub struct Header {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// `"MAJOR.MINOR"`.
    pub version: String,
    /// Producing tool, e.g. `offcputime`.
    pub tool: String,
    pub tool_version: String,
    /// Target processes (empty: system-wide).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pids: Vec<u32>,
    /// Command line of a launched target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Clock of every `*_ns` timestamp: `monotonic` (CLOCK_MONOTONIC).
    pub clock: String,
    /// Capture window start, ns on `clock`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ns: Option<u64>,
    /// Capture window end, ns on `clock` (also in the trailer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ns: Option<u64>,
    /// On-CPU sampling frequency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freq_hz: Option<u64>,
    /// Off-CPU blocks shorter than this are counted as short in the stats
    /// (`short_blocks`, `short_blocks_ns`); they keep their stacks like any other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_block_ns: Option<u64>,
    /// Everything that was lost or approximated, by name (see [`Stats`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lost: BTreeMap<String, u64>,
    /// 1.4: `--prepare` as given (when the capture was set up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare: Option<String>,
    /// 1.4: `--activate` as given (when recording began: `start_ns`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activate: Option<String>,
    /// 1.4: CLOCK_REALTIME ns at `start_ns`, to line captures of several
    /// hosts up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_realtime_ns: Option<u64>,
    /// 1.4: the event the `on` stacks were sampled on (`oncputime -e`),
    /// absent for the cpu clock. With it, the `ns` of `on` stacks is a
    /// count of this event (the unit of the profile), not time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// 1.4: with `event`, one sample was taken every this many events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_period: Option<u64>,
    /// 1.5: what the running kernel could not give the capture (a name a
    /// feature: `task_btf`, `switch_prev_state`, `sleepable_iter`,
    /// `lazy_maps_in_perf`, `attach_cookie`; see docs/kernels.md),
    /// absent where it gave everything.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_lacks: Vec<String>,
    /// 1.7: the versions whose frames the capture that wrote the stream
    /// reads with no flag, by reader (`python`, `php`, `ruby`): each
    /// reader's list, from its own layout tables (`{"python": ["3.9",
    /// ..., "3.15"]}`). What the report says of a runtime whose frames
    /// are not read; absent in older streams (the versions are then not
    /// known from the stream) and from tools that read no runtime.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub runtime_versions: BTreeMap<String, Vec<String>>,
}

/// The header's fields of 1.3 are decoded as derived; the ones 1.4 added
/// at its end only where the record has bytes left, so that a header of
/// binary framing 3 (or 2) still reads.
impl<C> bincode::Decode<C> for Header {
    fn decode<D: bincode::de::Decoder<Context = C>>(d: &mut D) -> Result<Self, bincode::error::DecodeError> {
        use bincode::de::read::Reader;
        use bincode::Decode as De;
        let mut h = Header {
            format: De::decode(d)?,
            version: De::decode(d)?,
            tool: De::decode(d)?,
            tool_version: De::decode(d)?,
            pids: De::decode(d)?,
            command: De::decode(d)?,
            clock: De::decode(d)?,
            start_ns: De::decode(d)?,
            end_ns: De::decode(d)?,
            freq_hz: De::decode(d)?,
            min_block_ns: De::decode(d)?,
            lost: De::decode(d)?,
            ..Header::new("", "")
        };
        if d.reader().peek_read(1).is_some() {
            h.prepare = De::decode(d)?;
            h.activate = De::decode(d)?;
            h.start_realtime_ns = De::decode(d)?;
            h.event = De::decode(d)?;
            h.event_period = De::decode(d)?;
        }
        if d.reader().peek_read(1).is_some() {
            h.kernel_lacks = De::decode(d)?;
        }
        if d.reader().peek_read(1).is_some() {
            h.runtime_versions = De::decode(d)?;
        }
        Ok(h)
    }
}
bincode::impl_borrow_decode!(Header);

impl Header {
    /// A header of the current version for `tool`.
    pub fn new(tool: &str, tool_version: &str) -> Self {
        Header {
            format: FORMAT_NAME.to_string(),
            version: format!("{VERSION_MAJOR}.{VERSION_MINOR}"),
            tool: tool.to_string(),
            tool_version: tool_version.to_string(),
            pids: Vec::new(),
            command: None,
            clock: "monotonic".to_string(),
            start_ns: None,
            end_ns: None,
            freq_hz: None,
            min_block_ns: None,
            lost: BTreeMap::new(),
            prepare: None,
            activate: None,
            start_realtime_ns: None,
            event: None,
            event_period: None,
            kernel_lacks: Vec::new(),
            runtime_versions: BTreeMap::new(),
        }
    }

    /// Window length, when both ends are known.
    pub fn window_ns(&self) -> Option<u64> {
        Some(self.end_ns?.saturating_sub(self.start_ns?))
    }
}

/// A list of versions (`MAJOR.MINOR`, in order) as the capture and the
/// report say it: `3.9-3.15` where three or more minors of one major
/// follow each other, else `8.2 and 8.4`, `3.1, 3.3 and 3.4`.
pub fn versions_said(versions: &[String]) -> String {
    let parsed: Option<Vec<(u32, u32)>> = versions
        .iter()
        .map(|v| {
            let (a, b) = v.split_once('.')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect();
    let run = parsed.is_some_and(|p| p.len() >= 3 && p.windows(2).all(|w| w[1].0 == w[0].0 && w[1].1 == w[0].1 + 1));
    match versions {
        [first, .., last] if run => format!("{first}-{last}"),
        [rest @ .., last] if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => versions.join(""),
    }
}

/// What the producer knows of one thread over the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Encode)]
pub struct Thread {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    /// `main`, or a role from the thread name / behaviour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Window clipped to the thread's life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ns: Option<u64>,
    /// Exact on-CPU time (switch-in to switch-out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_ns: Option<u64>,
    /// The part of `on_ns` the thread's own CPU clock did not count: the
    /// hypervisor ran something else on its vCPU ("steal").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal_ns: Option<u64>,
    /// Exact off-CPU time by state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub off_ns: Option<StateNs>,
    /// On-CPU samples taken of this thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    /// The process's generation under its pid in this capture: 1 for the
    /// second process the capture saw with this pid (the pid was used
    /// again after the first one exited), 2 for the third...; absent for
    /// the first. Two processes with one pid are two processes: readers
    /// key a process by (pid, pgen) and a thread by (pid, pgen, tid).
    /// Added in 1.4 after the rest; last: decoded only where the binary
    /// record has bytes left (see [`trailing_pgen`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pgen: Option<u32>,
}

impl Thread {
    pub fn new(pid: u32, tid: u32, comm: &str) -> Self {
        Thread {
            pid,
            tid,
            comm: comm.to_string(),
            role: None,
            start_ns: None,
            end_ns: None,
            on_ns: None,
            steal_ns: None,
            off_ns: None,
            samples: None,
            pgen: None,
        }
    }
    pub fn alive_ns(&self) -> Option<u64> {
        Some(self.end_ns?.saturating_sub(self.start_ns?))
    }
}

/// A process's executable mappings, so that its addresses can be
/// symbolized after it exited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Encode)]
pub struct Maps {
    pub pid: u32,
    pub maps: Vec<MapEntry>,
    /// Frames the capture named itself, by the address that stands for
    /// each in `Stack::ustack` (an interpreter's frames read at the stack's
    /// moment: CPython's, `py::NAME:FILE` with its line; the addresses lie
    /// in no mapping, at [`NAMED_ADDR_BASE`] and up). Since 1.3.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<NamedAddr>,
    /// The process's generation under its pid in this capture: 1 for the
    /// second process the capture saw with this pid (the pid was used
    /// again after the first one exited), 2 for the third...; absent for
    /// the first. Two processes with one pid are two processes: readers
    /// key a process by (pid, pgen) and a thread by (pid, pgen, tid).
    /// Added in 1.4 after the rest; last: decoded only where the binary
    /// record has bytes left (see [`trailing_pgen`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pgen: Option<u32>,
}

/// User addresses from here up are never code (the kernel's half): the
/// capture uses them for the frames it names in `Maps::names`.
pub const NAMED_ADDR_BASE: u64 = 0xfff0_0000_0000_0000;

/// One frame named by the capture (see [`Maps::names`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Encode, Decode)]
pub struct NamedAddr {
    pub addr: u64,
    pub frame: Frame,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Encode, Decode)]
pub struct MapEntry {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    pub path: String,
    /// Hex GNU build id of `path`, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
}

/// What a stack's time is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Encode, Decode)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Sampled on-CPU.
    On,
    /// Measured off-CPU (blocked or runnable), see `state`.
    Off,
    /// Work on a GPU, under the CPU stack that launched it.
    Gpu,
    /// Unclassified: plain folded input without a kind marker.
    Other,
}

impl Kind {
    /// Leaf marker in folded output.
    pub fn marker(self) -> &'static str {
        match self {
            Kind::On => "_[c]",
            Kind::Off => "_[o]",
            Kind::Gpu => "_[g]",
            Kind::Other => "",
        }
    }
}

/// One stack and the time spent in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Encode)]
pub struct Stack {
    pub kind: Kind,
    /// Off-CPU thread state (kind `off` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
    #[serde(default)]
    pub pid: u32,
    #[serde(default)]
    pub tid: u32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub comm: String,
    /// Raw user addresses, root first. The last (leaf) is an instruction
    /// pointer; the others are return addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "crate::addrs::deserialize")]
    pub ustack: Vec<u64>,
    /// Raw kernel addresses, root first; they sit above `ustack`.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "crate::addrs::deserialize")]
    pub kstack: Vec<u64>,
    /// Symbolized frames, root first. When present, they replace the
    /// addresses for display.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frames: Vec<Frame>,
    /// 1.3: the frames are the stack table's stack of this id (a
    /// [`StackDef`] earlier in the stream), written instead of `frames`.
    /// A [`crate::Reader`] fills `frames` from it and clears it, unless
    /// asked to keep ids ([`crate::Reader::keep_stack_ids`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_id: Option<u32>,
    /// Time in ns: measured (off, gpu) or scaled from samples (on).
    #[serde(default)]
    pub ns: u64,
    /// Events folded into this record (samples, blocks, kernels).
    #[serde(default)]
    pub count: u64,
    /// GPU activity detail (kind `gpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuInfo>,
    /// Who ended the blocks of this record (kind `off` only, 1.3): the
    /// part of a (thread, stack, state)'s time that one waker woke. The
    /// same stack may come in several records, one per waker, and one
    /// without a waker for the rest; a reader that ignores this field
    /// sums them to the same time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waker: Option<Box<Waker>>,
    /// The process's generation under its pid in this capture: 1 for the
    /// second process the capture saw with this pid (the pid was used
    /// again after the first one exited), 2 for the third...; absent for
    /// the first. Two processes with one pid are two processes: readers
    /// key a process by (pid, pgen) and a thread by (pid, pgen, tid).
    /// Added in 1.4 after the rest; last: decoded only where the binary
    /// record has bytes left (see [`trailing_pgen`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pgen: Option<u32>,
    /// 1.6, kind `off`: what the blocks of this record waited on, named
    /// in the target's own view (`file /var/log/app.log`, `tcp
    /// 127.0.0.1:5432`, `unix /run/x.sock`, `pipe`, `lock g_lock`,
    /// `child make 4242`, `fds epoll_wait`...: wallclock-stream(5)). The
    /// same stack may come in several records, one per object, and one
    /// without for the rest; a reader that ignores this field sums them
    /// to the same time. Last: decoded only where the binary record has
    /// bytes left (framing 5 and older end before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
}

impl Stack {
    pub fn new(kind: Kind, pid: u32, tid: u32, comm: &str) -> Self {
        Stack {
            kind,
            state: None,
            pid,
            tid,
            comm: comm.to_string(),
            ustack: Vec::new(),
            kstack: Vec::new(),
            frames: Vec::new(),
            stack_id: None,
            ns: 0,
            count: 0,
            gpu: None,
            waker: None,
            pgen: None,
            object: None,
        }
    }
}

/// 1.3: a frame of the stack table: `id` names it in [`StackDef`]s. A
/// later definition of the same id replaces it (concatenated streams).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Encode, Decode)]
pub struct FrameDef {
    pub id: u32,
    pub frame: Frame,
}

/// 1.3: a stack of the stack table: its frames as [`FrameDef`] ids, root
/// first; `id` names it in [`Stack::stack_id`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Encode, Decode)]
pub struct StackDef {
    pub id: u32,
    pub frames: Vec<u32>,
}

/// What ended a block (1.3): a thread (`context` `thread`, with its stack
/// when it woke the blocked one) or an interrupt (`timer`, `irq`,
/// `softirq`: no thread, whatever thread the interrupt happened to stop).
/// No field of it is called `ns` (stacksym splices frames before a stack's
/// `"ns"` key).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Encode, Decode)]
pub struct Waker {
    /// `thread`, `timer`, `irq` or `softirq`; a reader shows a value it
    /// does not know as it is.
    pub context: String,
    #[serde(default)]
    pub pid: u32,
    #[serde(default)]
    pub tid: u32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub comm: String,
    /// The waker's stack when it woke the blocked thread, as `Stack`'s.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "crate::addrs::deserialize")]
    pub ustack: Vec<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "crate::addrs::deserialize")]
    pub kstack: Vec<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frames: Vec<Frame>,
    /// The waker's own last block before it woke this one (a chain:
    /// `offcputime --wake-depth 2` and more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<Box<WakerBlock>>,
}

impl Waker {
    pub fn new(context: &str, pid: u32, tid: u32, comm: &str) -> Self {
        Waker {
            context: context.to_string(),
            pid,
            tid,
            comm: comm.to_string(),
            ustack: Vec::new(),
            kstack: Vec::new(),
            frames: Vec::new(),
            blocked: None,
        }
    }

    /// The name the waker goes by: `comm` (tid) for a thread, `[timer]`
    /// `[irq]` `[softirq]` for an interrupt.
    pub fn who(&self) -> String {
        if self.context == "thread" {
            format!("{} ({})", self.comm, self.tid)
        } else {
            format!("[{}]", self.context)
        }
    }
}

/// A waker's own block, the next hop of a chain.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Encode, Decode)]
pub struct WakerBlock {
    pub state: State,
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "crate::addrs::deserialize")]
    pub ustack: Vec<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "crate::addrs::deserialize")]
    pub kstack: Vec<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frames: Vec<Frame>,
    /// Who ended that block, when the chain goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waker: Option<Box<Waker>>,
}

/// One frame of a symbolized stack.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Encode, Decode)]
pub struct Frame {
    /// Function name, demangled; `module+0xoffset` when unresolved;
    /// `[bracketed]` for synthetic frames (`[lost stack]`, `[steal]`, `[filtered: over -M]`).
    pub func: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub inlined: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub kernel: bool,
    /// Just-in-time compiled code (perf map).
    #[serde(default, skip_serializing_if = "is_false")]
    pub jit: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Frame {
    pub fn named(func: impl Into<String>) -> Self {
        Frame {
            func: func.into(),
            module: None,
            file: None,
            line: None,
            inlined: false,
            kernel: false,
            jit: false,
        }
    }
    pub fn kernel(func: impl Into<String>) -> Self {
        Frame { kernel: true, ..Frame::named(func) }
    }

    /// An Erlang function the capture's BEAM reader named from the VM's
    /// own tables (`$m:f/a`, JIT code).
    pub fn is_beam_named(&self) -> bool {
        self.jit && self.func.starts_with('$')
    }

    /// The module of a frame the symbolizer could not name: `M` for
    /// `M+0xOFFSET` in module `M`, `[unknown]` for an address in no known
    /// mapping; `None` for a named frame.
    pub fn unnamed_module(&self) -> Option<&str> {
        if let Some(m) = self.module.as_deref() {
            let rest = self.func.strip_prefix(m)?;
            return rest.starts_with("+0x").then_some(m);
        }
        self.func.starts_with("[unknown]+0x").then_some("[unknown]")
    }
}

/// GPU activity detail.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, Encode, Decode)]
pub struct GpuInfo {
    /// `kernel`, `memcpy`, `memset`, `sync`, `overhead`...
    pub activity: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<u32>,
    /// Summed delay from the launch API call to the activity's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_delay_ns: Option<u64>,
    /// What ran: the demangled kernel name, or `[memcpy HtoD]`,
    /// `[memset]`, `[sync device]`...; the GPU leaf frame below the
    /// launch stack (which stays raw in `ustack` for `stacksym`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Trailer: totals and everything lost, by name. Well-known names:
/// `short_blocks` and `short_blocks_ns` (blocks under min-block, kept under
/// their own stacks: a count, not a loss),
/// `lost_stacks` (stack unreadable, kept under `[lost stack]`),
/// `ringbuf_drops`, `map_full`, `samples`, `switches`, `gpu_records_dropped`;
/// per module `M` the symbolizer could not name frames in (1.2):
/// `unnamed_addrs:M`, `unnamed_ns:M`, `unnamed_count:M` (see [`UNNAMED_NS`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Encode, Decode)]
pub struct Stats {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub counts: BTreeMap<String, u64>,
}

/// One interval of one thread's time (1.3, `--timeline`): running on a
/// CPU, off-CPU in a state, or a GPU activity it launched. A thread's
/// `on` and `off` slices tile its time in the window without overlap;
/// a gap is time whose events were dropped (counted in the trailer as
/// `timeline_drops` and `timeline_dropped_ns`). Off-CPU blocks shorter
/// than the capture's `--timeline-min` are not slices of their own: they
/// stay inside the running slice around them, counted in its
/// `short_blocks` and `short_ns`. The summed `stack` records stay exact
/// whatever the timeline drops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Encode, Decode)]
pub struct Slice {
    /// `on` (running), `off` (see `state`) or `gpu`.
    pub kind: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
    pub pid: u32,
    pub tid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The `id` of the `slice_stack` record holding this slice's stack:
    /// where an off-CPU slice blocked (the stack its time has in the summed
    /// view), or what launched a GPU activity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<u64>,
    /// Off-CPU blocks under `--timeline-min` inside a running slice.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub short_blocks: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub short_ns: u64,
    /// GPU activity detail (kind `gpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuInfo>,
    /// Who ended an off-CPU slice (`offcputime --timeline --wakers`): the
    /// waker and its stack when it woke the thread. Last: field order is
    /// the binary encoding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waker: Option<Waker>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Slice {
    pub fn new(kind: Kind, pid: u32, tid: u32, start_ns: u64, end_ns: u64) -> Self {
        Slice { kind, state: None, pid, tid, start_ns, end_ns, stack: None, short_blocks: 0, short_ns: 0, gpu: None, waker: None }
    }
}

/// A stack named by `slice` records (1.3): raw addresses as in a `stack`
/// record (symbolized by the consumer, with the stream's `maps`), or
/// `frames` for a synthetic stack (`[lost stack]`, `[thread start]`...).
/// Decoded in pgen.rs (`object` only where the record has bytes left).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Encode)]
pub struct SliceStack {
    pub id: u64,
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "crate::addrs::deserialize")]
    pub ustack: Vec<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "crate::addrs::deserialize")]
    pub kstack: Vec<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frames: Vec<Frame>,
    /// 1.6: what the off-CPU slices naming this stack waited on, as a
    /// `stack` record's `object` (one `slice_stack` per stack and
    /// object). Last: absent in framing 5 and older and in framing 6 as
    /// written before it (decoded only where the record has bytes left).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::versions_said;

    #[test]
    fn versions_are_said_as_a_range_or_a_list() {
        let v = |s: &[&str]| versions_said(&s.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(v(&["3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15"]), "3.9-3.15");
        assert_eq!(v(&["8.2", "8.4"]), "8.2 and 8.4");
        assert_eq!(v(&["3.1", "3.3", "3.4"]), "3.1, 3.3 and 3.4");
        assert_eq!(v(&["3.10", "3.11"]), "3.10 and 3.11");
        assert_eq!(v(&["3.10"]), "3.10");
        assert_eq!(v(&[]), "");
    }
}
