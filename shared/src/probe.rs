//! 1.4: the program's own events (`--probe`): one [`ProbeEvent`] per
//! firing of a user probe (uprobe, uretprobe, USDT), and one [`Span`] per
//! entry and exit matched on a thread (`uspan:FUNC`, `A ~~ B`).
//!
//! A span's off-CPU time is measured, by state, from the thread's own
//! blocks between its entry and its exit (each block lies wholly inside:
//! the thread is on a CPU at both ends); its on-CPU time is the rest of its
//! wall time. Samples, where a consumer has them, only divide that on-CPU
//! time between stacks, as they divide a thread's.

use std::collections::BTreeMap;

use bincode::{Decode, Encode};
use serde::{Deserialize, Serialize};

use crate::state::StateNs;

/// One firing of a probe on a target thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Encode, Decode)]
pub struct ProbeEvent {
    /// The probe's name (`| name:"…" |` in its spec, else the spec).
    pub probe: String,
    pub pid: u32,
    pub tid: u32,
    /// When it fired, ns on the header's clock.
    pub ts_ns: u64,
    /// The arguments the spec asked for, by name (`arg0`, `ret`, ...), as
    /// signed 64-bit integers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, i64>,
    /// With `stack` in the spec: the `slice_stack` record of the stack it
    /// fired in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<u64>,
}

/// One span: an entry and the exit that matched it on the same thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Encode, Decode)]
pub struct Span {
    /// The span's name (`| name:"…" |` in its spec, else the spec).
    pub name: String,
    pub pid: u32,
    pub tid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The entry's arguments (and `ret` of an exit that has one).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, i64>,
    /// Off-CPU time inside the span, by state, measured; on-CPU is
    /// `end_ns - start_ns` minus its total.
    pub off_ns: StateNs,
    /// Spans open inside this one on the same thread when it began
    /// (0 for the outermost).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub depth: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Span {
    pub fn wall_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
    /// On-CPU: the wall time less the measured off-CPU time.
    pub fn on_ns(&self) -> u64 {
        self.wall_ns().saturating_sub(self.off_ns.total())
    }
}
