//! Frames left unnamed (`module+0xOFFSET`), counted per module for the
//! stream's trailer (`unnamed_addrs:M`, `unnamed_ns:M`, `unnamed_count:M`),
//! each module's reason told once on stderr.

use std::collections::BTreeMap;

use wallclock_stream::{Frame, Stack, UNNAMED_ADDRS, UNNAMED_COUNT, UNNAMED_NS};

use crate::engine::{Engine, Key, Space};

impl Engine {
    /// Count an address whose frames are unnamed, and say why once per module.
    pub(crate) fn note_unnamed(&mut self, key: Key, frames: &[Frame]) {
        if let Some(m) = frames.iter().find_map(Frame::unnamed_module) {
            if !self.unnamed_keys.contains_key(&key) {
                *self.pending.entry(format!("{UNNAMED_ADDRS}{m}")).or_insert(0) += 1;
            }
            if self.warned_modules.insert(m.to_string()) {
                let why = self.why.get(m).cloned().unwrap_or_else(|| "no symbol covers these addresses".into());
                self.warn(format!("frames left as {m}+0x...: {why}"));
            }
            self.unnamed_keys.insert(key, m.into());
        }
    }

    /// Count the time of `s` under each module it has unnamed frames in
    /// (once per module). Call after [`Engine::prepare`] saw `s`.
    pub fn account(&mut self, s: &Stack) {
        let mods = self.unnamed_modules(s);
        self.add_unnamed_time(&mods, s);
    }

    /// The modules `s` has unnamed frames in, each once.
    pub(crate) fn unnamed_modules(&self, s: &Stack) -> Box<[Box<str>]> {
        let mut mods: Vec<Box<str>> = Vec::new();
        if self.unnamed_keys.is_empty() {
            return mods.into();
        }
        for (space, addrs) in [(Space::User(s.pid), &s.ustack), (Space::Kernel, &s.kstack)] {
            for (i, &a) in addrs.iter().enumerate() {
                if let Some(m) = self.unnamed_keys.get(&(space, a, i + 1 < addrs.len())) {
                    if !mods.contains(m) {
                        mods.push(m.clone());
                    }
                }
            }
        }
        mods.into()
    }

    /// Add the time of `s` to each of `mods`.
    pub(crate) fn add_unnamed_time(&mut self, mods: &[Box<str>], s: &Stack) {
        add_time(&mut self.unnamed_time, mods, s);
    }

    /// The `unnamed_*:MODULE` and `bad_names` counts gathered since the
    /// last call, for the stream's trailer.
    pub fn take_counts(&mut self) -> BTreeMap<String, u64> {
        self.warn_cuts();
        for (m, (ns, count)) in std::mem::take(&mut self.unnamed_time) {
            *self.pending.entry(format!("{UNNAMED_NS}{m}")).or_insert(0) += ns;
            *self.pending.entry(format!("{UNNAMED_COUNT}{m}")).or_insert(0) += count;
        }
        // Names marked since the last trailer, read or resolved here.
        let bad = wallclock_stream::names::replaced();
        if bad > self.bad_names_told {
            *self.pending.entry(wallclock_stream::names::STATS_KEY.to_string()).or_insert(0) += bad - self.bad_names_told;
            self.bad_names_told = bad;
        }
        std::mem::take(&mut self.pending)
    }
}

/// Add the time of `s` to each of `mods` in `time` (the engine's
/// `unnamed_time`, borrowed apart from the rest of it).
pub(crate) fn add_time(time: &mut BTreeMap<Box<str>, (u64, u64)>, mods: &[Box<str>], s: &Stack) {
    for m in mods {
        match time.get_mut(m) {
            Some(t) => *t = (t.0 + s.ns, t.1 + s.count),
            None => {
                time.insert(m.clone(), (s.ns, s.count));
            }
        }
    }
}
