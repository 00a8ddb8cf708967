//! Code that JIT runtimes generate in anonymous memory: which runtime a
//! process is (the JVM, V8), why its code stayed unnamed, and the marker
//! frame of a stack cut in such code.
//!
//! A thread's outermost frame is always in a file (`clone3`, `_start`); a
//! stack whose outermost frame is JIT code was cut there: the unwinder
//! follows frame pointers through code without an unwind table, and the
//! JVM's compiled code keeps none unless started with
//! `-XX:+PreserveFramePointer` (V8 always keeps them). Such a stack gets
//! [`CUT`] (or [`CUT_JVM`], which names the flag) as its root frame.

use wallclock_stream::{Frame, Stack};

use crate::engine::procmaps::Mapping;

use crate::engine::Engine;

/// Root frame of a stack cut in JIT code.
pub const CUT: &str = "[stack cut in JIT code]";
/// Processes outside a known runtime named each in the warning about
/// cut stacks; the rest are counted in one line.
const CUTS_NAMED: usize = 5;
/// The same, in a JVM: the flag that gives whole stacks.
pub const CUT_JVM: &str = "[stack cut in JIT code: java -XX:+PreserveFramePointer]";
/// Root frame of an Erlang process's stack, walked whole to its first
/// Erlang function (BEAM with `+JPperf true`): the process runs on a
/// stack of its own, not its scheduler thread's, and it ends there.
pub const ERLANG_ROOT: &str = "[Erlang process stack]";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runtime {
    Jvm,
    V8,
    /// V8 whose JavaScript frames the capture named from its heap.
    V8Read,
    Beam,
    Other,
}

/// Whether the capture named JavaScript frames (`JS:...`, v8 reader)
/// among the frames it named in a process.
pub(crate) fn v8_named(named: Option<&std::collections::HashMap<u64, Frame>>) -> bool {
    named.is_some_and(|m| m.values().any(|f| f.jit && f.func.starts_with("JS:")))
}

/// The runtime whose files a process maps: HotSpot's libjvm.so, Node's
/// binary or libnode.
pub(crate) fn runtime_of(maps: &[Mapping]) -> Runtime {
    let base = |m: &Mapping| m.path().rsplit('/').next().unwrap_or("").to_string();
    if maps.iter().any(|m| base(m) == "libjvm.so") {
        Runtime::Jvm
    } else if maps.iter().any(|m| base(m) == "beam.smp") {
        Runtime::Beam
    } else if maps.iter().any(|m| {
        let b = base(m);
        b == "node" || b == "nodejs" || b.starts_with("libnode.so")
    }) {
        Runtime::V8
    } else {
        Runtime::Other
    }
}

/// Frames in code outside every file: JIT code (named by a perf map or
/// not), or an address no mapping held.
pub(crate) fn is_anonymous(f: &Frame) -> bool {
    f.jit || f.module.as_deref() == Some("[anon]") || (f.module.is_none() && f.func.starts_with("[unknown]+"))
}

/// The capture's root frame of a stack whose unwind stopped short.
pub(crate) fn is_truncated(f: &Frame) -> bool {
    f.func == "[truncated]" && f.module.is_none() && !f.jit
}

/// Why code in anonymous memory of `pid` has no name, and what gives one.
pub(crate) fn why_unnamed(pid: u32, rt: Runtime, perf_map: Option<(&str, bool)>) -> String {
    match (rt, perf_map) {
        (Runtime::V8, None) => format!(
            "pid {pid} (node/V8): JIT code and no /tmp/perf-{pid}.map: start node with --perf-basic-prof to name its JavaScript functions"
        ),
        (Runtime::V8Read, _) => format!(
            "pid {pid} (node/V8): JIT code that is no JavaScript function the capture could read from V8's heap (V8's stubs and handlers, regular expressions, or a function moved before it was read)"
        ),
        (Runtime::Jvm, None) => format!(
            "pid {pid} (JVM): JIT code and no /tmp/perf-{pid}.map: the capture asks a running JVM for it (jcmd {pid} Compiler.perfmap); it did not get one (see its warnings)"
        ),
        (_, None) => format!("pid {pid}: anonymous memory (JIT code?) and no /tmp/perf-{pid}.map"),
        (_, Some((path, true))) => format!("pid {pid}: anonymous memory (JIT code?) and {path} was skipped (see its warning)"),
        (_, Some((path, false))) => format!(
            "pid {pid}: anonymous memory that {path} does not cover (code made after the map was written, or not code the runtime lists)"
        ),
    }
}

impl Engine {
    /// The runtime of `pid`, from its maps (the stream's, else /proc's).
    pub(crate) fn runtime(&mut self, pid: u32) -> Runtime {
        if let Some(&rt) = self.runtimes.get(&pid) {
            return rt;
        }
        let rt = match self.stream_maps.get(&pid).map(|m| runtime_of(m)) {
            Some(rt) if rt != Runtime::Other => rt,
            _ => self.snapshots.get(&pid).map_or(Runtime::Other, |m| runtime_of(m)),
        };
        self.runtimes.insert(pid, rt);
        rt
    }

    /// The marker frame for a stack of `pid` whose root frame is `root`,
    /// when the stack was cut in JIT code.
    pub(crate) fn cut_marker(&self, pid: u32, root: &Frame) -> Option<u32> {
        // `[unknown]+0x...` is outside every file only where the files
        // of the process are known; else nothing is known of it at all.
        let mapped = || self.stream_maps.contains_key(&pid) || self.snapshots.contains_key(&pid);
        if !is_anonymous(root) || (!root.jit && root.module.is_none() && !mapped()) {
            return None;
        }
        Some(match self.runtimes.get(&pid) {
            Some(Runtime::Jvm) => self.cut_ids[1],
            // Named by the VM's perf map: an Erlang process's whole stack.
            Some(Runtime::Beam) if root.jit => self.cut_ids[2],
            _ => self.cut_ids[0],
        })
    }

    /// Count the time of `s` (table id `id`) as cut or whole, per pid,
    /// once any stack was cut (no cost before).
    pub(crate) fn note_cut(&mut self, s: &Stack, id: u32) {
        if self.cut_stacks.is_empty() || s.ustack.is_empty() {
            return;
        }
        // On-CPU samples before stackmerge carry counts, not time.
        let w = if s.ns > 0 { s.ns } else { s.count };
        let t = self.cut_time.entry(s.pid).or_default();
        t.1 += w;
        if self.cut_stacks.contains(&id) {
            t.0 += w;
        }
    }

    /// Say once per process whose stacks were cut in JIT code for at
    /// least a tenth of its time, and how to get whole ones. (Stacks cut
    /// for another reason, too deep for the copied stack, are rarer.)
    /// A runtime's processes (JVM, V8) are named each, with the flag
    /// that helps; past [`CUTS_NAMED`] other processes, the rest are
    /// counted in one line: a system-wide capture of a build met 800 of
    /// them, a screen of warnings nobody reads.
    pub(crate) fn warn_cuts(&mut self) {
        let mut pids: Vec<(u32, u64, u64)> = self.cut_time.iter().map(|(&p, &(c, t))| (p, c, t)).collect();
        pids.sort_unstable();
        let (mut named, mut rest, mut rest_ns) = (0usize, Vec::new(), 0u64);
        for (pid, cut, total) in pids {
            if cut == 0 || cut * 10 < total || !self.cut_warned.insert(pid) {
                continue;
            }
            let share = cut as f64 * 100.0 / total as f64;
            let msg = match self.runtimes.get(&pid) {
                Some(Runtime::Jvm) => format!(
                    "pid {pid} (JVM): {share:.0}% of its stacks' time is in stacks cut in JIT code (its compiled code keeps no frame pointers; they start at {CUT_JVM}): start java with -XX:+PreserveFramePointer for whole stacks"
                ),
                Some(Runtime::Beam) => format!(
                    "pid {pid} (Erlang/BEAM): {share:.0}% of its stacks' time is in stacks that end at an Erlang process's first function (they start at {ERLANG_ROOT}, or {CUT} where unnamed): an Erlang process runs on a stack of its own, not its scheduler thread's"
                ),
                _ if named >= CUTS_NAMED => {
                    rest.push(pid);
                    rest_ns += cut;
                    continue;
                }
                _ => {
                    named += 1;
                    format!("pid {pid}: {share:.0}% of its stacks' time is in stacks cut in JIT code (code without frame pointers or unwind table; they start at {CUT})")
                }
            };
            self.warn(msg);
        }
        if !rest.is_empty() {
            let some: Vec<String> = rest.iter().take(5).map(u32::to_string).collect();
            self.warn(format!(
                "{} more processes (pids {}{}) have a tenth or more of their stacks' time in stacks cut in JIT code ({:.3} s in all; they start at {CUT})",
                rest.len(),
                some.join(", "),
                if rest.len() > some.len() { ", ..." } else { "" },
                rest_ns as f64 / 1e9
            ));
        }
    }

    /// Table ids of the markers (again after the table is emptied).
    pub(crate) fn intern_cut_markers(&mut self) {
        self.cut_ids = [self.table.frame_id(&Frame::named(CUT)), self.table.frame_id(&Frame::named(CUT_JVM)), self.table.frame_id(&Frame::named(ERLANG_ROOT))];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str) -> Mapping {
        let e = wallclock_stream::MapEntry { start: 0x1000, end: 0x2000, offset: 0, path: path.into(), build_id: None };
        crate::engine::procmaps::Strings::default().mapping(&e, None)
    }

    #[test]
    fn runtimes_by_their_files() {
        assert_eq!(runtime_of(&[entry("/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so")]), Runtime::Jvm);
        assert_eq!(runtime_of(&[entry("/usr/bin/node")]), Runtime::V8);
        assert_eq!(runtime_of(&[entry("/usr/lib/x86_64-linux-gnu/libnode.so.108")]), Runtime::V8);
        assert_eq!(runtime_of(&[entry("/usr/bin/python3.11")]), Runtime::Other);
        assert_eq!(runtime_of(&[entry("/usr/lib/erlang/erts-13.1.5/bin/beam.smp")]), Runtime::Beam);
    }

    #[test]
    fn anonymous_frames() {
        assert!(is_anonymous(&Frame { jit: true, ..Frame::named("long Main.spin(long)") }));
        assert!(is_anonymous(&Frame { module: Some("[anon]".into()), ..Frame::named("[anon]+0x10") }));
        assert!(is_anonymous(&Frame::named("[unknown]+0x7f0000001000")));
        assert!(!is_anonymous(&Frame { module: Some("libc.so.6".into()), ..Frame::named("clone3") }));
    }

    #[test]
    fn many_cut_processes_are_counted_in_one_line() {
        let mut e = Engine::new(crate::engine::Options::default());
        e.runtimes.insert(7, Runtime::Jvm);
        // Pids 1..=12 all cut; 7 a JVM (named whatever the count); 20 cut
        // for a twentieth of its time only (not said).
        for pid in 1..=12u32 {
            e.cut_time.insert(pid, (3_000_000, 3_000_000));
        }
        e.cut_time.insert(20, (1, 20));
        e.warn_cuts();
        let named: Vec<&String> = e.warned.iter().filter(|w| w.starts_with("pid ")).collect();
        assert_eq!(named.len(), CUTS_NAMED + 1, "{:?}", e.warned);
        assert!(e.warned.iter().any(|w| w.starts_with("pid 7 (JVM)") && w.contains("PreserveFramePointer")));
        let rest: Vec<&String> = e.warned.iter().filter(|w| w.contains("more processes")).collect();
        assert_eq!(rest.len(), 1, "{:?}", e.warned);
        assert!(rest[0].starts_with("6 more processes (pids 6, 8, 9, 10, 11, ...)") && rest[0].contains("0.018 s"), "{}", rest[0]);
        assert!(!e.warned.iter().any(|w| w.contains("pid 20") || w.contains(" 20,")));
        // Said once: a second trailer adds nothing.
        let n = e.warned.len();
        e.warn_cuts();
        assert_eq!(e.warned.len(), n);
    }
}
