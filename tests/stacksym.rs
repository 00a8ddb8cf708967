//! stacksym against programs built here whose functions we know: a C++
//! program (namespace, template, always-inlined helper) built with g++ and a
//! Rust program built with rustc. Their addresses are symbolized while they
//! run and again after they exited (from the stream's maps record), and the
//! two outputs must be identical. Also: JIT frames from a perf map, kernel
//! addresses from /proc/kallsyms, unresolved addresses, bad input.

mod util;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use serde_json::{json, Value};
use wallclock_stream::{Frame, Record, Stack};

fn programs() -> PathBuf {
    util::root().join("tests/programs/stacksym")
}

fn build(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

fn build_cxx(dir: &Path) -> PathBuf {
    let exe = dir.join("cxxprog");
    build(Command::new("g++").args(["-g", "-O2", "-fno-omit-frame-pointer", "-o"]).arg(&exe).arg(programs().join("cxxprog.cpp")));
    exe
}

/// `mangling`: `legacy` (rustc's default, names end in a `17h<hash>E`) or `v0`.
fn build_rust(dir: &Path, mangling: &str) -> PathBuf {
    let exe = dir.join("rsprog");
    let mut cmd = Command::new("rustc");
    cmd.arg("-g");
    if mangling != "legacy" {
        cmd.args(["-C", &format!("symbol-mangling-version={mangling}")]);
    }
    build(cmd.arg("-o").arg(&exe).arg(programs().join("rsprog.rs")));
    exe
}

/// A running test program: it printed its pid and addresses and waits for
/// its stdin to close.
struct Prog {
    child: Child,
    pid: u32,
    chain: Vec<u64>,
    jit: Option<u64>,
}

impl Prog {
    fn start(exe: &Path) -> Prog {
        let mut child = Command::new(exe).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let mut out: BufReader<ChildStdout> = BufReader::new(child.stdout.take().unwrap());
        let (mut pid, mut chain, mut jit) = (0, Vec::new(), None);
        loop {
            let mut line = String::new();
            assert!(out.read_line(&mut line).unwrap() > 0, "{} exited early", exe.display());
            let mut w = line.split_whitespace();
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
            match w.next() {
                Some("pid") => pid = w.next().unwrap().parse().unwrap(),
                Some("chain") => chain = w.map(hex).collect(),
                Some("jit") => jit = Some(hex(w.next().unwrap())),
                Some("result") => break,
                _ => panic!("unexpected line {line:?}"),
            }
        }
        assert!(pid > 0 && chain.len() == 4 && chain.iter().all(|&a| a > 0), "bad addresses {chain:x?}");
        Prog { child, pid, chain, jit }
    }

    /// What a producer writes while the process lives: its file mappings.
    fn maps_record(&self) -> Value {
        let text = std::fs::read_to_string(format!("/proc/{}/maps", self.pid)).unwrap();
        let maps: Vec<Value> = text
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                if f.len() < 6 || !f[5].starts_with('/') {
                    return None;
                }
                let (s, e) = f[0].split_once('-').unwrap();
                let h = |x: &str| u64::from_str_radix(x, 16).unwrap();
                Some(json!({"start": h(s), "end": h(e), "offset": h(f[2]), "path": f[5]}))
            })
            .collect();
        json!({"type": "maps", "pid": self.pid, "maps": maps})
    }

    fn stop(mut self) {
        drop(self.child.stdin.take());
        assert!(self.child.wait().unwrap().success());
        // Reaped: stacksym can no longer read the process.
        assert!(!Path::new(&format!("/proc/{}", self.pid)).exists());
    }
}

impl Drop for Prog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn header() -> Value {
    json!({"type": "header", "format": "wallclock", "version": "1.0", "tool": "test", "tool_version": "0", "clock": "monotonic"})
}

fn stack(pid: u32, ustack: &[u64], kstack: &[u64]) -> Value {
    json!({"type": "stack", "kind": "off", "state": "S", "pid": pid, "tid": pid, "comm": "prog",
           "ustack": ustack, "kstack": kstack, "ns": 1000, "count": 1})
}

fn stream(recs: &[Value]) -> String {
    recs.iter().map(|r| format!("{r}\n")).collect()
}

fn records(out: &str) -> Vec<Record> {
    util::resolved(out).lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

fn stacks(out: &str) -> Vec<Stack> {
    records(out).into_iter().filter_map(|r| if let Record::Stack(s) = r { Some(s) } else { None }).collect()
}

fn funcs(frames: &[Frame]) -> Vec<&str> {
    frames.iter().map(|f| f.func.as_str()).collect()
}

/// 1-based line of the first source line containing `needle`.
fn source_line(file: &str, needle: &str) -> u32 {
    let text = std::fs::read_to_string(programs().join(file)).unwrap();
    text.lines().position(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle:?} not in {file}")) as u32 + 1
}

/// `nm -C` of `exe`: what binutils says the symbols are called.
fn nm_demangled(exe: &Path) -> String {
    let out = Command::new("nm").arg("-C").arg(exe).output().unwrap();
    String::from_utf8(out.stdout).unwrap()
}

fn symbolize(args: &[&str], input: &str) -> String {
    util::ok("stacksym", args, input.as_bytes())
}

#[test]
fn cxx_template_namespace_inline_alive_and_after_exit() {
    let dir = util::scratch("stacksym-cxx");
    let exe = build_cxx(&dir);
    let prog = Prog::start(&exe);
    let input = stream(&[header(), prog.maps_record(), stack(prog.pid, &prog.chain, &[])]);
    let file = dir.join("in.jsonl");
    std::fs::write(&file, &input).unwrap();

    let alive = symbolize(&[], &input);
    let alive_file = symbolize(&[file.to_str().unwrap()], "");
    assert_eq!(alive, alive_file, "stdin and file argument differ");
    // Without the maps record, the live process gives the same frames.
    let live_only = symbolize(&[], &stream(&[header(), stack(prog.pid, &prog.chain, &[])]));
    assert_eq!(stacks(&live_only)[0].frames, stacks(&alive)[0].frames);
    prog.stop();
    let gone = symbolize(&[file.to_str().unwrap()], "");
    assert_eq!(alive, gone, "output changed once the process exited");

    // Everything but the stack passes through unchanged, maps record included.
    let (inr, outr) = (records(&input), records(&gone));
    assert_eq!(inr.len(), outr.len());
    assert_eq!(inr[..2], outr[..2]);

    let s = &stacks(&gone)[0];
    assert_eq!(s.ustack, records_stack(&inr).ustack, "raw addresses kept");
    let want = ["main", "wcns::outer(int)", "int wcns::tmpl<int>(int)", "wcns::helper(int)", "wcns::probe()"];
    assert_eq!(funcs(&s.frames), want, "frames: {:#?}", s.frames);
    // Names as binutils demangles them (helper is inlined: no symbol of its own).
    let nm = nm_demangled(&exe);
    for f in ["wcns::outer(int)", "int wcns::tmpl<int>(int)", "wcns::probe()"] {
        assert!(nm.contains(f), "{f} not in nm -C output");
    }
    let inlined: Vec<bool> = s.frames.iter().map(|f| f.inlined).collect();
    assert_eq!(inlined, [false, false, false, true, false]);
    assert!(s.frames.iter().all(|f| f.module.as_deref() == Some("cxxprog") && !f.kernel && !f.jit));
    // Each frame's line is its call site: return addresses were looked up at addr - 1.
    let src = "cxxprog.cpp";
    let lines: Vec<Option<u32>> = s.frames[..4].iter().map(|f| f.line).collect();
    assert_eq!(
        lines,
        [
            Some(source_line(src, "int r = wcns::outer(argc);")),
            Some(source_line(src, "int r = tmpl<int>(v) + 2;")),
            Some(source_line(src, "T r = helper(x) + 1;")),
            Some(source_line(src, "    probe();")),
        ]
    );
    assert!(s.frames.iter().all(|f| f.file.as_deref().is_some_and(|p| p.ends_with(src))));

    // --no-inline: one frame per address; --no-demangle: names as in the binary.
    let plain = stacks(&symbolize(&["--no-inline", "--no-demangle", file.to_str().unwrap()], ""));
    assert_eq!(funcs(&plain[0].frames), ["main", "_ZN4wcns5outerEi", "_ZN4wcns4tmplIiEET_S1_", "_ZN4wcns5probeEv"]);
    assert!(plain[0].frames.iter().all(|f| !f.inlined));
}

fn records_stack(recs: &[Record]) -> &Stack {
    recs.iter().find_map(|r| if let Record::Stack(s) = r { Some(s) } else { None }).unwrap()
}

fn rust_names(mangling: &str, want: [&str; 4]) {
    let dir = util::scratch(&format!("stacksym-rust-{mangling}"));
    let exe = build_rust(&dir, mangling);
    let prog = Prog::start(&exe);
    let input = stream(&[header(), prog.maps_record(), stack(prog.pid, &prog.chain, &[])]);
    let alive = symbolize(&[], &input);
    prog.stop();
    let gone = symbolize(&[], &input);
    assert_eq!(alive, gone, "output changed once the process exited");
    let s = &stacks(&gone)[0];
    assert_eq!(funcs(&s.frames), want, "frames: {:#?}", s.frames);
    for f in &s.frames {
        assert!(!f.func.contains("17h") && !f.func.contains("::h") && !f.func.starts_with("_R"), "mangled: {}", f.func);
        assert_eq!(f.module.as_deref(), Some("rsprog"));
        assert!(f.file.as_deref().is_some_and(|p| p.ends_with("rsprog.rs")));
    }
    // The names really were mangled in the binary (legacy ones with a hash).
    let raw = stacks(&symbolize(&["--no-demangle"], &input));
    let mangled = &raw[0].frames[2].func;
    assert!(mangled.starts_with(if mangling == "v0" { "_R" } else { "_ZN" }), "{mangled}");
    assert_eq!(mangling == "legacy", mangled.contains("17h"), "{mangled}");
}

#[test]
fn rust_legacy_mangling_demangled_without_hashes() {
    rust_names("legacy", ["rsprog::main", "rsprog::wcrs::engine::Runner::run", "rsprog::wcrs::engine::step", "rsprog::wcrs::leaf"]);
}

#[test]
fn rust_v0_mangling_demangled_with_generics() {
    rust_names("v0", ["rsprog::main", "<rsprog::wcrs::engine::Runner>::run", "rsprog::wcrs::engine::step::<u64>", "rsprog::wcrs::leaf"]);
}

#[test]
fn jit_frame_from_perf_map_of_live_process() {
    let dir = util::scratch("stacksym-jit");
    let exe = build_cxx(&dir);
    let prog = Prog::start(&exe);
    let jit = prog.jit.unwrap();
    let map = PathBuf::from(format!("/tmp/perf-{}.map", prog.pid));
    std::fs::write(&map, format!("{:x} 40 jitted::hot_loop\n{:x} 20 jitted::other\n", jit, jit + 0x40)).unwrap();
    let input = stream(&[header(), prog.maps_record(), stack(prog.pid, &[prog.chain[0], jit + 0x10, jit + 0x44], &[])]);
    let alive = symbolize(&[], &input);
    prog.stop();
    // JIT runtimes leave their perf map behind: it still names the frames.
    let gone = symbolize(&[], &input);
    let _ = std::fs::remove_file(&map);
    assert_eq!(alive, gone);
    let s = &stacks(&alive)[0];
    assert_eq!(funcs(&s.frames), ["main", "jitted::hot_loop", "jitted::other"]);
    assert_eq!(s.frames.iter().map(|f| f.jit).collect::<Vec<_>>(), [false, true, true]);
}

/// Two kernel text symbols with room after them, from /proc/kallsyms.
fn kernel_symbols() -> Vec<(u64, String)> {
    let text = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let mut syms: Vec<(u64, char, String)> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3).then(|| (u64::from_str_radix(f[0], 16).unwrap(), f[1].chars().next().unwrap(), f[2].to_string()))
        })
        .collect();
    syms.sort();
    let mut out = Vec::new();
    for w in syms.windows(3) {
        let (prev, cur, next) = (&w[0], &w[1], &w[2]);
        if (cur.1 == 'T' || cur.1 == 't') && cur.0 > prev.0 && next.0 >= cur.0 + 32 && ["schedule", "do_syscall_64", "vfs_read", "do_nanosleep"].contains(&cur.2.as_str()) {
            out.push((cur.0, cur.2.clone()));
        }
    }
    out
}

#[test]
fn kernel_addresses_from_kallsyms() {
    if util::skip_without_root("stacksym") {
        return;
    }
    let syms = kernel_symbols();
    assert!(syms.len() >= 2, "kallsyms has none of the expected symbols (kptr_restrict?): {syms:?}");
    // Root first: the first is a return address (at +8), the leaf an instruction pointer (at +0).
    let input = stream(&[header(), stack(u32::MAX - 1, &[], &[syms[0].0 + 8, syms[1].0])]);
    let s = &stacks(&symbolize(&[], &input))[0];
    assert_eq!(funcs(&s.frames), [syms[0].1.as_str(), syms[1].1.as_str()]);
    assert!(s.frames.iter().all(|f| f.kernel));
}

#[test]
fn unresolved_addresses_keep_module_and_offset() {
    let dir = util::scratch("stacksym-unresolved");
    // A mapping of a file that is not ELF, and of a stripped binary.
    let blob = dir.join("blob.bin");
    std::fs::write(&blob, vec![0u8; 8192]).unwrap();
    let exe = build_cxx(&dir);
    let stripped = dir.join("cxxprog.stripped");
    std::fs::copy(&exe, &stripped).unwrap();
    build(Command::new("strip").arg(&stripped));
    let outer = nm_demangled(&exe)
        .lines()
        .find(|l| l.ends_with("wcns::outer(int)"))
        .map(|l| u64::from_str_radix(l.split_whitespace().next().unwrap(), 16).unwrap())
        .unwrap();
    let pid = 4_000_000_000; // never a live pid
    let maps = json!({"type": "maps", "pid": pid, "maps": [
        {"start": 0x10000, "end": 0x12000, "offset": 0x3000, "path": blob.to_str().unwrap()},
        {"start": 0x20000, "end": 0x40000, "offset": 0, "path": stripped.to_str().unwrap()},
    ]});
    let input = stream(&[
        header(),
        maps,
        stack(pid, &[0x10123, 0x20000 + outer + 4], &[]),
        stack(pid + 1, &[0xdead0], &[]),
    ]);
    let out = util::run("stacksym", &["-q"], input.as_bytes());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let st = stacks(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(funcs(&st[0].frames), ["blob.bin+0x3123".to_string(), format!("cxxprog.stripped+{:#x}", outer + 4)]);
    assert_eq!(st[0].frames[0].module.as_deref(), Some("blob.bin"));
    // No maps and no process: the address stays visible.
    assert_eq!(funcs(&st[1].frames), ["[unknown]+0xdead0"]);
}

/// A system-wide capture: thousands of processes mapping the same files
/// at their own addresses. stacksym drops the caches of processes it no
/// longer meets: a process met again after that is named as before, and
/// an unnamed address of it is counted once in the trailer.
#[test]
fn many_processes_named_alike_and_counted_once() {
    let dir = util::scratch("stacksym-many");
    let blob = dir.join("blob.bin");
    std::fs::write(&blob, vec![0u8; 1 << 16]).unwrap();
    let exe = build_cxx(&dir);
    let outer = nm_demangled(&exe)
        .lines()
        .find(|l| l.ends_with("wcns::outer(int)"))
        .map(|l| u64::from_str_radix(l.split_whitespace().next().unwrap(), 16).unwrap())
        .unwrap();
    let (pids, per_pid) = (3000u32, 8u64);
    let base = |i: u32| 0x1000_0000 + u64::from(i) * 0x100_0000;
    let pid = |i: u32| 4_000_000_000 + i; // never live
    let mut recs = vec![header()];
    for i in 0..pids {
        recs.push(json!({"type": "maps", "pid": pid(i), "maps": [
            {"start": base(i), "end": base(i) + 0x10000, "offset": 0, "path": blob.to_str().unwrap()},
            {"start": base(i) + 0x80_0000, "end": base(i) + 0xa0_0000, "offset": 0, "path": exe.to_str().unwrap()},
        ]}));
    }
    let stack_of = |i: u32, k: u64| stack(pid(i), &[base(i) + 0x100 + k * 16 + u64::from(i % 7), base(i) + 0x80_0000 + outer + 4], &[]);
    for i in 0..pids {
        recs.extend((0..per_pid).map(|k| stack_of(i, k)));
    }
    // The first processes again, long after their caches were dropped.
    for i in 0..50 {
        recs.extend((0..per_pid).map(|k| stack_of(i, k)));
    }
    let out = symbolize(&["-q"], &stream(&recs));
    let st = stacks(&out);
    let n = (pids as usize) * per_pid as usize;
    assert_eq!(st.len(), n + 50 * per_pid as usize);
    for (j, s) in st.iter().enumerate() {
        let (i, k) = ((j % n) as u64 / per_pid, j as u64 % per_pid);
        let names = funcs(&s.frames);
        assert_eq!(names[0], format!("blob.bin+{:#x}", 0x100 + k * 16 + i % 7), "stack {j}");
        assert_eq!(names.last(), Some(&"wcns::outer(int)"), "stack {j}: {names:?}");
        assert_eq!(s.frames, st[j % n].frames, "stack {j} named otherwise the second time");
    }
    let counts: Vec<_> = records(&out)
        .into_iter()
        .filter_map(|r| if let Record::Stats(st) = r { st.counts.get("unnamed_addrs:blob.bin").copied() } else { None })
        .collect();
    assert_eq!(counts, [n as u64], "each unnamed address of each process once");
}

#[test]
fn bad_line_is_named_after_writing_what_came_before() {
    let dir = util::scratch("stacksym-bad");
    let good = stream(&[header(), stack(4_000_000_000, &[0x1234], &[])]);
    let input = format!("{good}{{\"type\":\"stack\",\"kind\":\n{}", stream(&[header()]));
    // -q: the unknown address's warning aside, the error is one line.
    let out = util::run("stacksym", &["-q"], input.as_bytes());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 3") && err.lines().count() == 1, "stderr: {err}");
    let st = stacks(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(funcs(&st[0].frames), ["[unknown]+0x1234"], "the good record was still written");

    let file = dir.join("bad.jsonl");
    std::fs::write(&file, &input).unwrap();
    let out = util::run("stacksym", &[file.to_str().unwrap(), "-o", dir.join("out").to_str().unwrap()], b"");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("bad.jsonl") && err.contains("line 3"), "stderr: {err}");
    assert_eq!(records(&std::fs::read_to_string(dir.join("out")).unwrap()).len(), 2, "the header and the good stack");
}

#[test]
fn help_has_examples() {
    let help = symbolize(&["--help"], "");
    assert!(help.contains("EXAMPLES:") && help.contains("--no-inline") && help.contains("--no-demangle"));
}

#[test]
fn rerun_force_strip_and_maps_after_stacks() {
    let dir = util::scratch("stacksym-rerun");
    let exe = build_cxx(&dir);
    let prog = Prog::start(&exe);
    let maps = prog.maps_record();
    let syms = if util::is_root() { kernel_symbols() } else { Vec::new() };
    let kstack: Vec<u64> = syms.iter().take(2).map(|s| s.0 + 1).collect();
    let st = stack(prog.pid, &prog.chain, &kstack);
    let first = symbolize(&[], &stream(&[header(), maps.clone(), st.clone()]));
    prog.stop();
    // A maps record after the stacks it describes (same input chunk) works too.
    let later = symbolize(&[], &stream(&[header(), st, maps]));
    assert_eq!(stacks(&first), stacks(&later));
    // User frames first, then kernel frames (they sit above the user part).
    let s = &stacks(&first)[0];
    let kernel: Vec<bool> = s.frames.iter().map(|f| f.kernel).collect();
    let mut want = vec![false; 5];
    want.extend(kstack.iter().map(|_| true));
    assert_eq!(kernel, want, "{:#?}", s.frames);
    if !syms.is_empty() {
        assert_eq!(s.frames.last().unwrap().func, syms[1].1);
    }
    // Symbolized stacks pass through a second run unchanged...
    assert_eq!(symbolize(&[], &first), first);
    // ...unless forced: the same frames, and --strip drops the addresses.
    let again = stacks(&symbolize(&["--force", "--strip"], &first));
    assert_eq!(again[0].frames, s.frames);
    assert!(again[0].ustack.is_empty() && again[0].kstack.is_empty());
}

/// Inputs nobody here wrote: already-symbolized folded stacks (bcc, FlameGraph)
/// and raw `perf script` output pass through as stream records, frames intact.
#[test]
fn foreign_inputs_pass_through_golden() {
    for (rel, golden) in [
        ("bcc/offcputime-f-mixed.folded", "stacksym/bcc-offcputime.jsonl"),
        ("flamegraph/perf-dd-stacks-01-collapsed-all.txt", "stacksym/perf-dd-collapsed.jsonl"),
        ("flamegraph/perf-dd-stacks-01.txt", "stacksym/perf-dd-script.jsonl"),
    ] {
        let Some(path) = util::testdata(rel) else { return };
        let text = std::fs::read_to_string(&path).unwrap();
        let via_stdin = symbolize(&[], &text);
        let via_file = symbolize(&[path.to_str().unwrap()], "");
        assert_eq!(via_stdin, via_file, "{rel}: stdin and file argument differ");
        // The same records as before the stack table (1.3), frames written out.
        util::golden(golden, &util::resolved(&via_stdin));
        let st = stacks(&via_stdin);
        assert!(st.iter().all(|s| !s.frames.is_empty() && s.ustack.is_empty()), "{rel}");
        if rel.ends_with(".folded") || rel.ends_with("-all.txt") {
            // One record per folded line; values are microseconds.
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            assert_eq!(st.len(), lines.len(), "{rel}");
            let us: u64 = lines.iter().map(|l| l.rsplit(' ').next().unwrap().trim().parse::<u64>().unwrap()).sum();
            assert_eq!(st.iter().map(|s| s.ns).sum::<u64>(), us * 1000, "{rel}");
            // The leaf names survive (annotations such as _[k] become flags).
            for (s, l) in st.iter().zip(&lines) {
                let leaf = l.rsplit_once(' ').unwrap().0.rsplit(';').next().unwrap();
                assert!(leaf.starts_with(s.frames.last().unwrap().func.as_str()), "{rel}: {leaf}");
            }
        }
    }
}

#[test]
fn empty_input_large_input_and_broken_pipe() {
    assert_eq!(symbolize(&[], ""), "");
    // More records than one chunk (64k): addresses cached across chunks.
    let pid = 4_000_000_000u32;
    let mut recs = vec![header()];
    recs.extend((0..70_000u64).map(|i| stack(pid, &[0x1000 + (i % 977) * 16, 0x9000 + (i % 13)], &[])));
    let input = stream(&recs);
    let st = stacks(&symbolize(&[], &input));
    assert_eq!(st.len(), 70_000);
    for (i, s) in st.iter().enumerate() {
        let i = i as u64;
        let want = [format!("[unknown]+{:#x}", 0x1000 + (i % 977) * 16), format!("[unknown]+{:#x}", 0x9000 + (i % 13))];
        assert_eq!(funcs(&s.frames), want);
    }
    // `| head`: the reader goes away, stacksym exits quietly with 0.
    let (first, status, err) = util::first_line_then_close("stacksym", &["-q"], input.into_bytes());
    assert!(first.contains("header"));
    assert!(status.success(), "{err}");
    assert!(err.is_empty(), "{err}");
}

/// Frames the capture named itself (an interpreter's, in the Maps
/// record's `names`) name their addresses, among the native ones, for a
/// process long gone.
#[test]
fn frames_named_by_the_capture() {
    let dir = util::scratch("stacksym-named");
    let exe = build_cxx(&dir);
    let prog = Prog::start(&exe);
    let mut maps = prog.maps_record();
    let py = 0xfff0_0000_0000_0010u64;
    maps["names"] = json!([{"addr": py, "frame": {"func": "py::work:/app/w.py", "file": "/app/w.py", "line": 7}},
                           {"addr": py + 16, "frame": {"func": "py::<module>:/app/w.py", "file": "/app/w.py", "line": 2}}]);
    let input = stream(&[header(), maps, stack(prog.pid, &[prog.chain[0], py + 16, py, prog.chain[1]], &[])]);
    prog.stop();
    let out = stacks(&symbolize(&[], &input));
    let f = &out[0].frames;
    let i = f.iter().position(|f| f.func == "py::<module>:/app/w.py").expect("named frame");
    assert_eq!(f[i + 1].func, "py::work:/app/w.py");
    assert_eq!((f[i + 1].file.as_deref(), f[i + 1].line), (Some("/app/w.py"), Some(7)));
    // The native frames around them are named as without.
    assert!(f[..i].iter().all(|f| !f.func.starts_with("py::") && !f.func.contains("+0x")), "{:?}", funcs(f));
    assert!(f[i + 2..].iter().all(|f| !f.func.contains("+0x")), "{:?}", funcs(f));
}
