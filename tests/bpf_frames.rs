//! Kernel frames in BPF programs, named from the capture. A system-wide
//! capture's own threads run its BPF programs (its task iterator reads
//! every blocked thread's stack at the start, and is preempted inside it
//! on a busy machine); those programs are in /proc/kallsyms only while
//! loaded, and stacksym, run after the capture exited, named their frames
//! after the kernel's last symbol, `__stop_runtime_ptr_USER_PTR_MAX`.
//! Here: `offcputime -d 1` with no target, then `stacksym` on its stream
//! once it has exited, as scripts/wallclock runs them. Whether the
//! iterator is preempted inside its program is up to the scheduler, so
//! besides the stacks it caught, one stack is added to the stream at an
//! address inside the iterator (as the kernel would have written it), and
//! the stream is named again without its `ksyms` record (an older
//! capture's): `[unknown]`, never a far symbol. Root only (skips saying so
//! otherwise).

mod util;

use std::collections::HashMap;
use std::process::{Command, Stdio};

use serde_json::Value;

fn records(text: &str) -> Vec<Value> {
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:.200}: {e}"))).collect()
}

/// `bpf_prog_<16 hex digits>_<name>`: the name, if `func` is one.
fn prog_name(func: &str) -> Option<&str> {
    let rest = func.strip_prefix("bpf_prog_")?;
    let (tag, name) = rest.split_once('_')?;
    (tag.len() == 16 && tag.bytes().all(|b| b.is_ascii_hexdigit()) && !name.is_empty()).then_some(name)
}

/// A far symbol's name for a kernel address: the markers of sections'
/// ends that a nearest-symbol lookup fell back on.
fn far_symbol(func: &str) -> bool {
    func.starts_with("__stop_") || func.starts_with("__end_") || matches!(func, "_etext" | "_einittext" | "_end" | "__init_end")
}

/// The kernel frames of each stack record of a symbolized stream, with
/// the stack's pid and its raw kernel addresses (stacksym keeps them).
fn kernel_frames(text: &str) -> Vec<(u64, Vec<u64>, Vec<Value>)> {
    let named = records(text);
    let defs: HashMap<u64, Value> =
        named.iter().filter(|r| r["type"] == "frame").map(|r| (r["id"].as_u64().unwrap(), r["frame"].clone())).collect();
    let table: HashMap<u64, Vec<u64>> = named
        .iter()
        .filter(|r| r["type"] == "stackdef")
        .map(|r| (r["id"].as_u64().unwrap(), r["frames"].as_array().unwrap().iter().filter_map(Value::as_u64).collect()))
        .collect();
    let mut out = Vec::new();
    for r in named.iter().filter(|r| r["type"] == "stack") {
        let mut frames: Vec<Value> = r["frames"].as_array().cloned().unwrap_or_default();
        if let Some(id) = r["stack_id"].as_u64() {
            frames.extend(table.get(&id).into_iter().flatten().map(|f| defs[f].clone()));
        }
        frames.retain(|f| f["kernel"] == true);
        let kstack = r["kstack"].as_array().into_iter().flatten().filter_map(Value::as_u64).collect();
        out.push((r["pid"].as_u64().unwrap(), kstack, frames));
    }
    out
}

fn func(f: &Value) -> &str {
    f["func"].as_str().unwrap_or("")
}

#[test]
fn the_captures_own_programs_are_named_from_the_capture() {
    if util::skip_without_root("bpf_frames") {
        return;
    }
    let dir = util::scratch("bpf-frames");
    let stream = dir.join("off.stream");
    let capture = Command::new(util::bin("offcputime")).args(["-d", "1", "-o"]).arg(&stream).stderr(Stdio::piped()).spawn().unwrap();
    let capture_pid = u64::from(capture.id());
    let out = capture.wait_with_output().unwrap();
    assert!(out.status.success(), "offcputime failed: {}", String::from_utf8_lossy(&out.stderr));

    // The stream lists the programs loaded while it ran, before its
    // stacks: this capture's task iterator and switch handler among them
    // (`snapshot`, `switch_btf`: bpf/snapshot.bpf.h, bpf/offcputime.bpf.c).
    let text = std::fs::read_to_string(&stream).unwrap();
    let raw = records(&text);
    let listed: Vec<(u64, u64, String)> = raw
        .iter()
        .filter(|r| r["type"] == "ksyms")
        .inspect(|r| assert_eq!(r["module"], "[bpf]"))
        .flat_map(|r| r["syms"].as_array().unwrap().iter())
        .map(|s| (s["addr"].as_u64().unwrap(), s["len"].as_u64().unwrap(), s["name"].as_str().unwrap().to_string()))
        .collect();
    let Some(iter) = listed.iter().find(|(_, len, n)| prog_name(n) == Some("snapshot") && *len > 0x10).cloned() else {
        panic!("no ksyms record listing the capture's task iterator: {listed:?}");
    };
    assert!(listed.iter().any(|(_, _, n)| prog_name(n) == Some("switch_btf")), "{listed:?}");
    let ksyms_at = raw.iter().position(|r| r["type"] == "ksyms").unwrap();
    let first_stack = raw.iter().position(|r| r["type"] == "stack").unwrap();
    assert!(ksyms_at < first_stack, "the ksyms record comes before the stacks");

    // A stack of the capture's main thread blocked inside its iterator,
    // added before the trailer, at a return address 0x10 into it.
    let inside = iter.0 + 0x10;
    let added = format!(
        r#"{{"type":"stack","kind":"off","state":"S","pid":{capture_pid},"tid":{capture_pid},"comm":"offcputime","kstack":[{inside}],"ns":1000,"count":1}}"#
    );
    let mut lines: Vec<&str> = text.lines().collect();
    let trailer = lines.iter().position(|l| l.contains(r#""type":"stats""#)).unwrap_or(lines.len());
    lines.insert(trailer, &added);
    let with = dir.join("with.stream");
    std::fs::write(&with, lines.join("\n") + "\n").unwrap();
    let without = dir.join("without.stream");
    std::fs::write(&without, lines.iter().filter(|l| !l.contains(r#""type":"ksyms""#)).copied().collect::<Vec<_>>().join("\n") + "\n").unwrap();

    // Named after the capture exited and unloaded its programs.
    let stacks = kernel_frames(&util::ok("stacksym", &[with.to_str().unwrap()], b""));
    let far: Vec<&str> = stacks.iter().flat_map(|(_, _, f)| f.iter().map(func)).filter(|f| far_symbol(f)).collect();
    assert!(far.is_empty(), "kernel frames named by a far symbol: {far:?}");
    for f in stacks.iter().flat_map(|(_, _, f)| f).filter(|f| f["module"] == "[bpf]") {
        assert!(listed.iter().any(|(_, _, n)| n == func(f)), "{} in [bpf] but not in the stream's ksyms record", func(f));
    }
    let mine = stacks.iter().find(|(pid, k, _)| *pid == capture_pid && k == &[inside]).expect("the added stack");
    assert_eq!(mine.2.len(), 1, "{:?}", mine.2);
    assert_eq!((func(&mine.2[0]), mine.2[0]["module"].as_str()), (iter.2.as_str(), Some("[bpf]")));
    // Any stack the capture's own threads left inside a program of its
    // (the iterator preempted) is named so too.
    let caught = stacks.iter().filter(|(pid, k, f)| *pid == capture_pid && k != &[inside] && f.iter().any(|f| f["module"] == "[bpf]")).count();
    eprintln!("bpf_frames: {caught} stacks of the capture's own threads inside its programs caught by the capture");

    // An older stream (no ksyms record): the address is in no symbol's
    // code now that the program is gone (or in a program loaded since).
    let stacks = kernel_frames(&util::ok("stacksym", &[without.to_str().unwrap()], b""));
    let far: Vec<&str> = stacks.iter().flat_map(|(_, _, f)| f.iter().map(func)).filter(|f| far_symbol(f)).collect();
    assert!(far.is_empty(), "without the record, kernel frames named by a far symbol: {far:?}");
    let mine = stacks.iter().find(|(pid, k, _)| *pid == capture_pid && k == &[inside]).expect("the added stack");
    let name = func(&mine.2[0]);
    assert!(name.starts_with("[unknown]+0x") || mine.2[0]["module"] == "[bpf]", "without the record: {:?}", mine.2);
}

/// Without root or a capture: `stacksym --kallsyms FILE` with this
/// machine's tail of kallsyms and a BPF program in it. An address past the
/// last kernel symbol (a data marker) is `[unknown]`, one in the program
/// is named as perf names it, one at a function's return address keeps
/// its name; a stream's ksyms record wins over kallsyms.
#[test]
fn kernel_addresses_in_no_symbols_code_are_unknown() {
    let dir = util::scratch("bpf-frames-kallsyms");
    let kallsyms = dir.join("kallsyms");
    std::fs::write(
        &kallsyms,
        "ffffffff81000000 T _stext\n\
         ffffffff81000100 T do_nanosleep\n\
         ffffffff81000200 T schedule\n\
         ffffffff822090c8 T _etext\n\
         ffffffff83b264c8 R __start_runtime_ptr_USER_PTR_MAX\n\
         ffffffff83b266f0 R __stop_runtime_ptr_USER_PTR_MAX\n\
         ffffffffc0026f68 t bpf_prog_f225b9a298e3b5c8_switch_btf\t[bpf]\n\
         ffffffffc0028c10 t bpf_prog_393e990012986b82_thread_new\t[bpf]\n\
         ffffffffc0201000 t ftrace_trampoline\t[__builtin__ftrace]\n",
    )
    .unwrap();
    let header = r#"{"type":"header","format":"wallclock","version":"1.5","tool":"offcputime","tool_version":"0","clock":"monotonic"}"#;
    // Root first: do_nanosleep's return address, schedule, the program,
    // an unloaded program's address, one far past the trampoline.
    let kstack = [0xffffffff81000140u64, 0xffffffff81000210, 0xffffffffc0027000, 0xffffffffc0010000, 0xffffffffc0300000];
    let stack = format!(r#"{{"type":"stack","kind":"off","state":"S","pid":4000000001,"tid":4000000001,"comm":"x","kstack":{kstack:?},"ns":5,"count":1}}"#);
    let input = format!("{header}\n{stack}\n");
    let funcs = |out: &str| -> Vec<(String, Option<String>)> {
        let recs: Vec<wallclock_stream::Record> =
            wallclock_stream::Reader::new(out.as_bytes(), "out", Default::default()).collect::<Result<_, _>>().unwrap();
        let s = recs.into_iter().find_map(|r| if let wallclock_stream::Record::Stack(s) = r { Some(s) } else { None }).unwrap();
        s.frames.into_iter().map(|f| (f.func, f.module)).collect()
    };
    let k = kallsyms.to_str().unwrap();
    let got = funcs(&util::ok("stacksym", &["-q", "--kallsyms", k], input.as_bytes()));
    let bpf = Some("[bpf]".to_string());
    assert_eq!(
        got,
        [
            ("do_nanosleep".to_string(), Some("[kernel]".to_string())),
            ("schedule".to_string(), Some("[kernel]".to_string())),
            ("bpf_prog_f225b9a298e3b5c8_switch_btf".to_string(), bpf.clone()),
            ("[unknown]+0xffffffffc0010000".to_string(), None),
            ("[unknown]+0xffffffffc0300000".to_string(), None),
        ]
    );
    // The stream's record names the unloaded program.
    let ksyms = r#"{"type":"ksyms","module":"[bpf]","syms":[{"addr":18446744072635875312,"len":256,"name":"bpf_prog_5a93185c26553e49_snapshot"}]}"#;
    assert_eq!(0xffffffffc0010000u64 - 16, 18446744072635875312, "16 bytes into it, a return address");
    let got = funcs(&util::ok("stacksym", &["-q", "--kallsyms", k], format!("{header}\n{ksyms}\n{stack}\n").as_bytes()));
    assert_eq!(got[3], ("bpf_prog_5a93185c26553e49_snapshot".to_string(), bpf));
}
