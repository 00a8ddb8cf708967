//! Frames left unnamed (`module+0xOFFSET`), counted per module for the
//! stream's trailer (`unnamed_addrs:M`, `unnamed_ns:M`, `unnamed_count:M`),
//! each module's reason told once on stderr.
//!
//! Code a runtime generates (outside every file, or in a file-like
//! mapping: opcache's `/dev/zero`, BEAM's `/memfd:vmem`) is told apart
//! from a binary without symbols: the reason names the runtime the
//! process runs and the flag that names its code ([`runtime_why`]).

use std::collections::BTreeMap;

use wallclock_stream::{Stack, UNNAMED_ADDRS, UNNAMED_COUNT, UNNAMED_NS};

use crate::engine::cache::NAMED;
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
            let rt = match space {
                Space::User(pid) if is_generated(&m) => {
                    let read = self.named.get(&pid).is_some_and(|n| n.values().any(wallclock_stream::Frame::is_beam_named));
                    self.stream_maps.get(&pid).or_else(|| self.snapshots.get(&pid)).and_then(|maps| runtime_why(pid, maps, read))
                }
                _ => None,
            };
            let why = rt.or_else(|| self.why.get(&m).cloned()).unwrap_or_else(|| "no symbol covers these addresses".into());
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
        for (space, addrs) in [(Space::User(crate::engine::space_pid(s)), &s.ustack), (Space::Kernel, &s.kstack)] {
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

/// Whether frames left as `module+0x...` are in generated code: outside
/// every file, or in a mapping named like a file that holds a runtime's
/// code (by its file name, as frames carry it).
pub(crate) fn is_generated(module: &str) -> bool {
    let base = module.rsplit('/').next().unwrap_or(module);
    matches!(base, "[unknown]" | "[anon]" | "zero" | "zero (deleted)") || base.starts_with("memfd:") || base.starts_with("[anon:") || base.starts_with("SYSV")
}

/// What names the generated code of `pid`, by the runtime its files say
/// it runs (None: not a runtime known here; the generic reason stands).
/// `read`: the capture named Erlang functions of `pid` from the VM's own
/// tables (its BEAM reader): code left unnamed there needs no flag.
pub(crate) fn runtime_why(pid: u32, maps: &[crate::engine::procmaps::Mapping], read: bool) -> Option<String> {
    let has = |f: &dyn Fn(&str) -> bool| maps.iter().any(|m| f(m.path().rsplit('/').next().unwrap_or("")));
    if has(&|b| b == "beam.smp") && read {
        return Some(format!(
            "pid {pid} (Erlang/BEAM): JIT code the capture did not name, though it read the VM's functions from its code tables: stacks taken before it had read them (the VM starting, or just attached)"
        ));
    }
    if has(&|b| b == "beam.smp") {
        return Some(format!(
            "pid {pid} (Erlang/BEAM): JIT code and no /tmp/perf-{pid}.map: start the VM with `erl +JPperf true` to name its Erlang functions (and walk their frames)"
        ));
    }
    if has(&|b| b.starts_with("php") && !b.ends_with(".so") || b.starts_with("libphp")) {
        return Some(format!(
            "pid {pid} (PHP): opcache's JIT code, unnamed (its PHP functions are named by the capture's frames, php::..., in the versions its header's runtime_versions lists); opcache.jit_debug=0x10 writes /tmp/perf-{pid}.map for the JIT code itself"
        ));
    }
    if has(&|b| b == "libcoreclr.so") {
        return Some(format!("pid {pid} (.NET): JIT code and no /tmp/perf-{pid}.map: start it with DOTNET_PerfMapEnabled=1 to name its methods"));
    }
    None
}

/// Add the time of `s` to each of `mods` in `time` (the engine's
/// `unnamed_time`, borrowed apart from the rest of it).
pub(crate) fn add_time(time: &mut BTreeMap<u32, (u64, u64)>, mods: impl IntoIterator<Item = u32>, s: &Stack) {
    for m in mods {
        let t = time.entry(m).or_default();
        *t = (t.0 + s.ns, t.1 + s.count);
    }
}
