//! Frames left unnamed (`module+0xOFFSET`), counted per module for the
//! stream's trailer (`unnamed_addrs:M`, `unnamed_ns:M`, `unnamed_count:M`),
//! each module's reason told once on stderr.

use std::collections::BTreeMap;

use wallclock_stream::{Stack, UNNAMED_ADDRS, UNNAMED_COUNT, UNNAMED_NS};

use crate::cache::NAMED;
use crate::engine::{Engine, Space};

impl Engine {
    /// The module (index in `modules`) the frames `ids` of `key` in
    /// `space` are left unnamed in, [`NAMED`] if none: counted once per
    /// address, and why said once per module.
    pub(crate) fn note_unnamed(&mut self, space: Space, key: (u64, bool), ids: &[u32]) -> u32 {
        let Some(m) = ids.iter().find_map(|&f| self.table.frame(f).unnamed_module()) else { return NAMED };
        let m = m.to_string();
        let counted = self.space(space).is_some_and(|c| c.counted(key));
        if !counted {
            *self.pending.entry(format!("{UNNAMED_ADDRS}{m}")).or_insert(0) += 1;
        }
        if self.warned_modules.insert(m.clone()) {
            let why = self.why.get(&m).cloned().unwrap_or_else(|| "no symbol covers these addresses".into());
            self.warn(format!("frames left as {m}+0x...: {why}"));
        }
        self.module_id(&m)
    }

    /// Count the time of `s` under each module it has unnamed frames in
    /// (once per module). Call after [`Engine::prepare`] saw `s`.
    pub fn account(&mut self, s: &Stack) {
        let mods = self.unnamed_modules(s);
        self.add_unnamed_time(&mods, s);
    }

    /// The modules `s` has unnamed frames in, each once.
    pub(crate) fn unnamed_modules(&self, s: &Stack) -> Box<[u32]> {
        let mut mods: Vec<u32> = Vec::new();
        if self.modules.is_empty() {
            return mods.into();
        }
        for (space, addrs) in [(Space::User(s.pid), &s.ustack), (Space::Kernel, &s.kstack)] {
            let Some(c) = self.space(space) else { continue };
            for (i, &a) in addrs.iter().enumerate() {
                if let Some(e) = c.addrs.get(&(a, i + 1 < addrs.len())) {
                    if e.unnamed != NAMED && !mods.contains(&e.unnamed) {
                        mods.push(e.unnamed);
                    }
                }
            }
        }
        mods.into()
    }

    /// Add the time of `s` to each of `mods`.
    pub(crate) fn add_unnamed_time(&mut self, mods: &[u32], s: &Stack) {
        add_time(&mut self.unnamed_time, mods.iter().copied(), s);
    }

    /// The `unnamed_*:MODULE` and `bad_names` counts gathered since the
    /// last call, for the stream's trailer.
    pub fn take_counts(&mut self) -> BTreeMap<String, u64> {
        self.warn_cuts();
        for (m, (ns, count)) in std::mem::take(&mut self.unnamed_time) {
            let m = &self.modules[m as usize];
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
pub(crate) fn add_time(time: &mut BTreeMap<u32, (u64, u64)>, mods: impl IntoIterator<Item = u32>, s: &Stack) {
    for m in mods {
        let t = time.entry(m).or_default();
        *t = (t.0 + s.ns, t.1 + s.count);
    }
}
