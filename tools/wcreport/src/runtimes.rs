//! What a JIT runtime needs for whole, named stacks, told per process from
//! the stacks themselves (the runtime by the files its frames are in):
//!
//! - Node (V8): JavaScript frames left as addresses outside every file,
//!   and none named (the capture names them from V8's heap), mean its
//!   metadata could not be read and there is no perf map:
//!   `--perf-basic-prof` writes one.
//! - The JVM: stacks rooted at stacksym's `[stack cut in JIT code...]`
//!   marker were cut in compiled code without frame pointers:
//!   `-XX:+PreserveFramePointer` keeps them. Methods left unnamed mean the
//!   capture got no perf map from the JVM.
//!
//! - Erlang (BEAM): JIT code without names (in `memfd:vmem`, or outside
//!   every file) means no perf map: `erl +JPperf true` writes one, and
//!   keeps frame pointers for whole stacks.
//! - PHP: opcache's JIT code (`/dev/zero`) is unnamed; the capture names
//!   PHP's functions from the executor (`php::...`): where none are,
//!   the frames of this PHP are not walked.
//! - .NET: JIT code without names: `DOTNET_PerfMapEnabled=1`.
//! - CPython, and Ruby, of versions whose frames the capture does not read:
//!   frames of this runtime are not walked; the line says which versions
//!   are read (no flag to add: `-X perf` names frames but the capture
//!   reads the same ones without it).
//!
//! Which versions are read is what the capture that wrote the stream
//! says in its header (`runtime_versions`, stream 1.7: each reader's list,
//! from its own tables); from an older stream the line says they are not
//! known.
//!
//! Each line says how much of the process's on-CPU time it concerns (and
//! of all its time); a share under 1% of either is left out (a few stacks
//! cut for another reason: deeper than the stack the capture copies).

use std::collections::BTreeMap;

use serde::Serialize;
use wallclock_stream::{Frame, Kind, Stack};

/// Root frame stacksym gives a stack cut in JIT code (stacksym::jit).
const CUT: &str = "[stack cut in JIT code";

/// One piece of advice for one process.
#[derive(Debug, Clone, Serialize)]
pub struct RuntimeAdvice {
    pub pid: u32,
    /// `jvm`, `v8`, `beam`, `dotnet`, `php`, `ruby` or `python`.
    pub runtime: &'static str,
    /// The flag that fixes it (empty: none does, the frames are not walked).
    pub flag: &'static str,
    /// The process's time concerned, and all of it (ns).
    pub ns: u64,
    pub total_ns: u64,
    pub text: String,
}

/// Time of a process: (all, on-CPU).
#[derive(Default, Clone, Copy)]
struct Ns(u64, u64);

impl Ns {
    fn add(&mut self, s: &Stack) {
        self.0 += s.ns;
        if s.kind == Kind::On {
            self.1 += s.ns;
        }
    }
}

#[derive(Default)]
struct Seen {
    jvm: bool,
    v8: bool,
    beam: bool,
    php: bool,
    dotnet: bool,
    ruby: bool,
    /// CPython's minor version, by its file's name.
    python: Option<u32>,
    /// Stacks with frames the capture read from PHP's or Python's
    /// interpreter (`php::`, `py::`).
    php_frames: Ns,
    py_frames: Ns,
    /// Ruby's (`rb::`, read for Ruby 3.1).
    rb_frames: Ns,
    /// Stacks with frames of the interpreter's own file.
    interp: Ns,
    total: Ns,
    /// Stacks cut in JIT code.
    cut: Ns,
    /// Stacks with frames in anonymous memory that have no name.
    unnamed_jit: Ns,
    /// JavaScript frames named by the capture from V8's heap or by a
    /// perf map: node needs no flag.
    js_named: bool,
    /// Erlang functions named by the capture's BEAM reader (`$m:f/a`).
    erl_named: bool,
}

fn base(m: &str) -> &str {
    m.rsplit('/').next().unwrap_or(m)
}

/// A frame of generated code left unnamed: outside every file, or in a
/// mapping named like a file that holds a runtime's code (opcache's
/// `/dev/zero`, BEAM's `/memfd:vmem`), as frames name their module.
fn unnamed_anonymous(f: &Frame) -> bool {
    if f.kernel || f.jit {
        return false;
    }
    let (m, _) = f.func.rsplit_once("+0x").unwrap_or(("", ""));
    let b = base(m);
    matches!(b, "[unknown]" | "[anon]" | "zero") || b.starts_with("memfd:") || b.starts_with("[anon:") || b.starts_with("SYSV")
}

/// CPython 3.N of a file named `libpython3.N...` or `python3.N`.
fn python_minor(b: &str) -> Option<u32> {
    let rest = b.strip_prefix("libpython3.").or_else(|| b.strip_prefix("python3."))?;
    let d: String = rest.chars().take_while(char::is_ascii_digit).collect();
    d.parse().ok()
}

/// The versions a capture reads, by reader (the headers'
/// `runtime_versions`; None: not known from the stream).
pub type Read<'a> = Option<&'a BTreeMap<String, Vec<String>>>;

/// What the capture reads of `reader`, in words (`CPython 3.9-3.15`),
/// for the lines below.
fn read_said(read: Read<'_>, reader: &str, runtime: &str) -> String {
    match read.map(|r| r.get(reader)) {
        None => "the versions the capture reads are not known from this stream".to_string(),
        Some(None) => format!("the capture reads no {runtime}"),
        Some(Some(v)) => format!("the capture reads {runtime} {}", wallclock_stream::versions_said(v)),
    }
}

/// The advice for the processes among `stacks` that need some; `read`:
/// the versions the capture reads.
pub fn advice<'a>(stacks: impl Iterator<Item = &'a Stack>, read: Read<'_>) -> Vec<RuntimeAdvice> {
    let mut by_pid: BTreeMap<u32, Seen> = BTreeMap::new();
    for s in stacks {
        let e = by_pid.entry(s.pid).or_default();
        e.total.add(s);
        for f in &s.frames {
            match f.module.as_deref().map(base) {
                Some("libjvm.so") => e.jvm = true,
                Some(m) if m == "node" || m.starts_with("libnode.so") => e.v8 = true,
                Some("beam.smp") => e.beam = true,
                Some("libcoreclr.so") => e.dotnet = true,
                Some(m) if (m.starts_with("php") && !m.contains(".so")) || m.starts_with("libphp") => e.php = true,
                Some(m) if m.starts_with("libruby") => e.ruby = true,
                Some(m) if python_minor(m).is_some() => e.python = python_minor(m),
                _ => {}
            }
        }
        let interp = |m: &str| m == "beam.smp" || (m.starts_with("php") && !m.contains(".so")) || m.starts_with("libphp") || m.starts_with("libruby") || python_minor(m).is_some();
        if s.frames.iter().any(|f| f.module.as_deref().map(base).is_some_and(interp)) {
            e.interp.add(s);
        }
        if s.frames.iter().any(|f| f.func.starts_with("php::")) {
            e.php_frames.add(s);
        }
        if s.frames.iter().any(|f| f.func.starts_with("py::")) {
            e.py_frames.add(s);
        }
        if s.frames.iter().any(|f| f.func.starts_with("rb::")) {
            e.rb_frames.add(s);
        }
        if s.frames.first().is_some_and(|f| f.func.starts_with(CUT)) {
            e.cut.add(s);
        }
        e.js_named |= s.frames.iter().any(|f| f.jit && f.func.starts_with("JS:"));
        e.erl_named |= s.frames.iter().any(Frame::is_beam_named);
        if s.frames.iter().any(unnamed_anonymous) {
            e.unnamed_jit.add(s);
        }
    }
    let mut out = Vec::new();
    for (pid, e) in by_pid {
        let pct = |a: u64, b: u64| if b > 0 { a as f64 * 100.0 / b as f64 } else { 0.0 };
        let total = e.total;
        let mut add = |runtime, flag, part: Ns, what: &str, fix: &str| {
            let (on, all) = (pct(part.1, total.1), pct(part.0, total.0));
            if on < 1.0 && all < 1.0 {
                return;
            }
            let text = format!("pid {pid}: {on:.0}% of its on-CPU time ({all:.0}% of all its time) {what}: {fix}");
            out.push(RuntimeAdvice { pid, runtime, flag, ns: part.0, total_ns: total.0, text });
        };
        if e.v8 && !e.js_named {
            let what = format!("has JavaScript frames without names (node wrote no /tmp/perf-{pid}.map)");
            add("v8", "--perf-basic-prof", e.unnamed_jit, &what, "start node with --perf-basic-prof");
        }
        if e.jvm {
            let what = "is in stacks cut in JIT code (compiled Java code keeps no frame pointers)";
            add("jvm", "-XX:+PreserveFramePointer", e.cut, what, "start java with -XX:+PreserveFramePointer for whole stacks");
            let what = "has Java frames without names (the capture got no perf map from the JVM: see its warnings)";
            let fix = "start java with -XX:+DumpPerfMapAtExit, or keep it running until the capture ends";
            add("jvm", "-XX:+DumpPerfMapAtExit", e.unnamed_jit, what, fix);
        }
        // Erlang functions the capture named from the VM's own tables:
        // what is left unnamed was taken before it had read them.
        if e.beam && !e.erl_named {
            let what = format!("has Erlang JIT code without names (the VM wrote no /tmp/perf-{pid}.map)");
            add("beam", "+JPperf true", e.unnamed_jit, &what, "start the VM with `erl +JPperf true` to name its Erlang functions and walk their frames");
        }
        if e.dotnet {
            let what = format!("has .NET JIT code without names (no /tmp/perf-{pid}.map)");
            add("dotnet", "DOTNET_PerfMapEnabled=1", e.unnamed_jit, &what, "start it with DOTNET_PerfMapEnabled=1 to name its methods");
        }
        if e.php && e.php_frames.0 == 0 {
            let what = format!("runs PHP whose frames are not walked ({})", read_said(read, "php", "PHP"));
            add("php", "", e.interp, &what, "its functions show as the interpreter's loop (execute_ex)");
        } else if e.php {
            let what = "has opcache JIT code without names (its PHP functions are named, php::...)";
            add("php", "opcache.jit_debug=0x10", e.unnamed_jit, what, "opcache.jit_debug=0x10 writes a perf map that names the JIT code too");
        }
        if e.ruby && e.rb_frames.0 == 0 {
            let what = format!("runs Ruby whose frames are not walked ({})", read_said(read, "ruby", "Ruby"));
            add("ruby", "", e.interp, &what, "its methods show as the interpreter's C functions (rbspy reads them)");
        }
        if let Some(minor) = e.python.filter(|_| e.py_frames.0 == 0) {
            // One line, which versions are read: no flag to add (the
            // capture reads them from the running interpreter).
            let said = read_said(read, "python", "CPython");
            let what = match read.map(|r| r.get("python").is_some_and(|v| v.contains(&format!("3.{minor}")))) {
                Some(true) => format!("runs CPython 3.{minor}, whose frames were not read (see the capture's warnings; {said})"),
                Some(false) => format!("runs CPython 3.{minor}, whose frames are not walked ({said})"),
                None => format!("runs CPython 3.{minor}, whose frames were not read ({said})"),
            };
            add("python", "", e.interp, &what, "its functions show as the interpreter's C functions");
        }
    }
    out
}

/// The report's lines, after the unnamed-time section.
pub fn section(v: &[RuntimeAdvice]) -> String {
    if v.is_empty() {
        return String::new();
    }
    let mut s = "runtimes (what gives whole, named stacks):\n".to_string();
    for a in v {
        s.push_str("  ");
        s.push_str(&a.text);
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(pid: u32, ns: u64, frames: Vec<Frame>) -> Stack {
        Stack { ns, count: 1, frames, ..Stack::new(Kind::On, pid, pid, "p") }
    }

    fn in_module(func: &str, module: &str) -> Frame {
        Frame { module: Some(module.into()), ..Frame::named(func) }
    }

    /// The versions a capture says it reads (its header's).
    fn read() -> BTreeMap<String, Vec<String>> {
        let v = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        [("python", v(&["3.10", "3.11", "3.12", "3.13", "3.14", "3.15"])), ("php", v(&["8.2", "8.4"])), ("ruby", v(&["3.1", "3.3", "3.4"]))]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }

    #[test]
    fn node_without_its_perf_map_is_told_the_flag() {
        let s = [
            stack(7, 300, vec![in_module("main", "node"), Frame::named("[unknown]+0x7f0000001000")]),
            stack(7, 100, vec![in_module("main", "node"), in_module("uv_run", "node")]),
        ];
        let a = advice(s.iter(), Some(&read()));
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].flag, "--perf-basic-prof");
        assert_eq!((a[0].ns, a[0].total_ns), (300, 400));
        assert!(a[0].text.contains("75% of its on-CPU time"), "{}", a[0].text);
    }

    #[test]
    fn a_jvm_with_cut_stacks_is_told_the_flag_and_named_jit_code_is_not_unnamed() {
        let cut = Frame::named("[stack cut in JIT code: java -XX:+PreserveFramePointer]");
        let spin = Frame { jit: true, ..Frame::named("long Main.spin(long)") };
        let s = [
            stack(9, 900, vec![cut, spin]),
            stack(9, 100, vec![in_module("start_thread", "libc.so.6"), in_module("thread_native_entry(Thread*)", "libjvm.so")]),
        ];
        let a = advice(s.iter(), Some(&read()));
        assert_eq!(a.len(), 1, "{a:?}");
        assert_eq!(a[0].flag, "-XX:+PreserveFramePointer");
        assert!(a[0].text.contains("90% of its on-CPU time"), "{}", a[0].text);
    }

    #[test]
    fn erlang_jit_code_in_its_memfd_is_told_the_flag() {
        let s = [
            stack(5, 800, vec![in_module("process_main", "beam.smp"), Frame::named("memfd:vmem+0x1234")]),
            stack(5, 200, vec![in_module("erts_schedule", "beam.smp")]),
        ];
        let a = advice(s.iter(), Some(&read()));
        assert_eq!(a.len(), 1, "{a:?}");
        assert_eq!(a[0].flag, "+JPperf true");
        assert!(a[0].text.contains("erl +JPperf true") && a[0].text.contains("80% of its on-CPU time"), "{}", a[0].text);
    }

    #[test]
    fn interpreters_whose_frames_are_not_walked_say_so() {
        let s = [stack(4, 100, vec![in_module("_PyEval_EvalFrameDefault", "libpython3.9.so.1.0")]), stack(6, 100, vec![in_module("vm_exec", "libruby-3.1.so.3.1")])];
        let a = advice(s.iter(), Some(&read()));
        assert_eq!(a.len(), 2, "{a:?}");
        assert!(a.iter().all(|a| a.text.contains("not walked")), "{a:?}");
        // CPython: one line, which versions are read, no flag.
        let py = a.iter().find(|a| a.runtime == "python").unwrap();
        assert!(py.text.contains("3.9") && py.text.contains("CPython 3.10-3.15") && !py.text.contains("-X"), "{}", py.text);
        assert_eq!(py.flag, "");
        // 3.14 with its frames read (py::): no line.
        let named = Frame { module: Some("work.py".into()), ..Frame::named("py::crunch:/w/work.py") };
        let s = [stack(9, 100, vec![in_module("_PyEval_EvalFrameDefault", "python3.14"), named])];
        assert!(advice(s.iter(), Some(&read())).is_empty());
        // PHP with its frames read: no such line; its JIT code (/dev/zero) unnamed: the flag.
        let php = Frame { module: Some("work.php".into()), ..Frame::named("php::crunch") };
        let s = [stack(8, 100, vec![in_module("execute_ex", "php8.2"), php, Frame::named("zero+0x10")])];
        let a = advice(s.iter(), Some(&read()));
        assert_eq!(a.len(), 1, "{a:?}");
        assert_eq!(a[0].flag, "opcache.jit_debug=0x10");
        // Ruby with its frames read (3.1): no such line.
        let s = [stack(6, 100, vec![in_module("rb_vm_exec", "libruby-3.1.so.3.1"), Frame::named("rb::crunch")])];
        assert!(advice(s.iter(), Some(&read())).is_empty());
    }

    /// From a stream whose header does not say what the capture reads
    /// (before 1.7): one line each, saying so; a CPython whose version
    /// the capture reads says where to look.
    #[test]
    fn versions_not_known_from_an_older_stream() {
        let s = [stack(4, 100, vec![in_module("_PyEval_EvalFrameDefault", "libpython3.9.so.1.0")]), stack(6, 100, vec![in_module("vm_exec", "libruby-3.1.so.3.1")])];
        let a = advice(s.iter(), None);
        assert_eq!(a.len(), 2, "{a:?}");
        assert!(a.iter().all(|a| a.text.contains("the versions the capture reads are not known from this stream")), "{a:?}");
        let py = a.iter().find(|a| a.runtime == "python").unwrap();
        assert!(py.text.contains("runs CPython 3.9, whose frames were not read"), "{}", py.text);
        let s = [stack(4, 100, vec![in_module("_PyEval_EvalFrameDefault", "libpython3.12.so.1.0")])];
        let a = advice(s.iter(), Some(&read()));
        assert!(a[0].text.contains("were not read (see the capture's warnings; the capture reads CPython 3.10-3.15)"), "{}", a[0].text);
    }

    #[test]
    fn node_with_named_javascript_needs_no_flag() {
        let js = Frame { jit: true, ..Frame::named("JS:*hashLoop /a/work.js:9:18") };
        let s = [
            stack(7, 300, vec![in_module("main", "node"), js, Frame::named("[unknown]+0x7f0000001000")]),
            stack(7, 100, vec![in_module("main", "node"), in_module("uv_run", "node")]),
        ];
        assert!(advice(s.iter(), Some(&read())).is_empty());
    }

    #[test]
    fn other_programs_get_no_advice() {
        let s = [stack(3, 10, vec![in_module("main", "prog"), Frame::named("[unknown]+0x10")])];
        assert!(advice(s.iter(), Some(&read())).is_empty());
    }
}
