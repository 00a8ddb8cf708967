//! Off-CPU thread states and time split by them: what both the stream's
//! records ([`crate::record`]) and the probes' spans ([`crate::probe`])
//! carry.

use bincode::{Decode, Encode};
use serde::{Deserialize, Serialize};

/// Off-CPU thread state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Encode, Decode)]
pub enum State {
    /// Runnable: preempted or woken, waiting for a CPU.
    R,
    /// Interruptible sleep: waiting for an event (sleep, lock, poll...).
    S,
    /// Uninterruptible: usually waiting for I/O.
    D,
    /// Anything else (stopped, traced, idle...).
    #[serde(rename = "other")]
    Other,
}

impl State {
    pub const ALL: [State; 4] = [State::R, State::S, State::D, State::Other];

    /// The human name used as the leaf frame by `stackmerge`.
    pub fn leaf_name(self) -> &'static str {
        match self {
            State::R => "[runnable]",
            State::S => "[sleep]",
            State::D => "[io]",
            State::Other => "[other]",
        }
    }

    /// Short label for reports.
    pub fn label(self) -> &'static str {
        match self {
            State::R => "runnable",
            State::S => "sleeping",
            State::D => "uninterruptible",
            State::Other => "other",
        }
    }

    /// Inverse of `leaf_name`.
    pub fn from_leaf_name(s: &str) -> Option<State> {
        State::ALL.into_iter().find(|st| st.leaf_name() == s)
    }
}

/// Off-CPU ns split by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, Encode, Decode)]
pub struct StateNs {
    #[serde(rename = "R", default)]
    pub r: u64,
    #[serde(rename = "S", default)]
    pub s: u64,
    #[serde(rename = "D", default)]
    pub d: u64,
    #[serde(default)]
    pub other: u64,
}

impl StateNs {
    pub fn total(&self) -> u64 {
        self.r + self.s + self.d + self.other
    }
    pub fn get(&self, st: State) -> u64 {
        match st {
            State::R => self.r,
            State::S => self.s,
            State::D => self.d,
            State::Other => self.other,
        }
    }
    pub fn get_mut(&mut self, st: State) -> &mut u64 {
        match st {
            State::R => &mut self.r,
            State::S => &mut self.s,
            State::D => &mut self.d,
            State::Other => &mut self.other,
        }
    }
    pub fn add(&mut self, other: &StateNs) {
        for st in State::ALL {
            *self.get_mut(st) += other.get(st);
        }
    }
}
