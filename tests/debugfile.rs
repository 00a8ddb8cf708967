//! Names for stripped code: a C program built with -g, its debug info split
//! off (`objcopy --only-keep-debug`), the binary stripped of every symbol
//! and given a `.gnu_debuglink`. stacksym must name its static functions
//! from the debug file wherever debuggers look for it (beside the binary,
//! in `.debug/` beside it, `/usr/lib/debug/.build-id/xx/yyyy.debug` with
//! and without a debuglink), and without one leave `prog+0x...` frames,
//! say once why (the debug file path it looked for) and count them per
//! module in the trailer.

mod util;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::json;
use wallclock_stream::{Record, Stack};

const FUNCS: [&str; 4] = ["main", "wcstrip_outer", "wcstrip_middle", "wcstrip_inner"];

fn sh(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// `DIR/prog` (stripped, debuglink to prog.debug), `DIR/nolink` (stripped,
/// no debuglink), the debug file `DIR/keep/prog.debug`, and the build id.
fn build(dir: &Path) -> (PathBuf, PathBuf, PathBuf, String) {
    let full = dir.join("full");
    let src = util::root().join("tests/programs/stacksym/stripped.c");
    sh(Command::new("gcc").args(["-g", "-O1", "-fno-optimize-sibling-calls", "-o"]).arg(&full).arg(src));
    std::fs::create_dir_all(dir.join("keep")).unwrap();
    sh(Command::new("objcopy").args(["--only-keep-debug", "full", "keep/prog.debug"]).current_dir(dir));
    sh(Command::new("strip").args(["--strip-all", "-o", "prog", "full"]).current_dir(dir));
    sh(Command::new("strip").args(["--strip-all", "-o", "nolink", "full"]).current_dir(dir));
    sh(Command::new("objcopy").args(["--add-gnu-debuglink=keep/prog.debug", "prog"]).current_dir(dir));
    let notes = Command::new("readelf").args(["-n"]).arg(&full).output().unwrap();
    let notes = String::from_utf8(notes.stdout).unwrap();
    let id = notes.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).expect("no build id").to_string();
    let symtab = Command::new("readelf").arg("-S").arg(dir.join("prog")).output().unwrap();
    assert!(!String::from_utf8_lossy(&symtab.stdout).contains(".symtab"), "prog still has a symbol table");
    (dir.join("prog"), dir.join("nolink"), dir.join("keep/prog.debug"), id)
}

/// Run `exe` until it printed its addresses; the stream (maps record and
/// one stack through its four functions) that a capture would write. The
/// process is gone when this returns: only the maps record names it.
fn capture(exe: &Path) -> String {
    let mut child = Command::new(exe).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let (mut pid, mut chain) = (0u32, Vec::new());
    loop {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "{} exited early", exe.display());
        let mut w = line.split_whitespace();
        match w.next() {
            Some("pid") => pid = w.next().unwrap().parse().unwrap(),
            Some("chain") => chain = w.map(|h| u64::from_str_radix(h, 16).unwrap()).collect::<Vec<u64>>(),
            _ => break,
        }
    }
    let maps: Vec<_> = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (s, e) = f[0].split_once('-')?;
            let h = |x: &str| u64::from_str_radix(x, 16).unwrap();
            (f.len() > 5 && f[5].starts_with('/')).then(|| json!({"start": h(s), "end": h(e), "offset": h(f[2]), "path": f[5]}))
        })
        .collect();
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    let recs = [
        json!({"type": "header", "format": "wallclock", "version": "1.2", "tool": "test", "tool_version": "0", "clock": "monotonic"}),
        json!({"type": "maps", "pid": pid, "maps": maps}),
        json!({"type": "stack", "kind": "off", "state": "S", "pid": pid, "tid": pid, "ustack": chain, "ns": 7000, "count": 2}),
        json!({"type": "stats", "end_ns": 1}),
    ];
    recs.iter().map(|r| format!("{r}\n")).collect()
}

/// stacksym --no-live: (function names, trailer counts, stderr).
fn symbolize(input: &str) -> (Vec<String>, std::collections::BTreeMap<String, u64>, String) {
    let out = util::run("stacksym", &["--no-live"], input.as_bytes());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let recs: Vec<Record> = util::resolved(&String::from_utf8(out.stdout).unwrap()).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let st: &Stack = recs.iter().find_map(|r| if let Record::Stack(s) = r { Some(s) } else { None }).unwrap();
    let Some(Record::Stats(stats)) = recs.last() else { panic!("no trailer") };
    (st.frames.iter().map(|f| f.func.clone()).collect(), stats.counts.clone(), String::from_utf8(out.stderr).unwrap())
}

/// Removes a file it placed under /usr/lib/debug, whatever happens.
struct Placed(PathBuf);
impl Drop for Placed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn stripped_binary_named_from_its_debug_file_where_debuggers_look() {
    let dir = util::scratch("stacksym-debugfile");
    let (prog, nolink, debug, id) = build(&dir);
    let build_id_path = PathBuf::from(format!("/usr/lib/debug/.build-id/{}/{}.debug", &id[..2], &id[2..]));

    // No debug file anywhere: module+offset, one line on stderr naming the
    // build-id path it looked for, and the module's counts in the trailer.
    let input = capture(&prog);
    let (names, counts, err) = symbolize(&input);
    assert!(names.iter().all(|n| n.starts_with("prog+0x")), "{names:?}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(build_id_path.to_str().unwrap()) && err.contains("-dbgsym"), "{err}");
    assert_eq!(counts.get("unnamed_addrs:prog"), Some(&4), "{counts:?}");
    assert_eq!(counts.get("unnamed_ns:prog"), Some(&7000));
    assert_eq!(counts.get("unnamed_count:prog"), Some(&2));

    // Beside the binary (the debuglink's name), then in .debug/ beside it.
    for place in [dir.join("prog.debug"), dir.join(".debug/prog.debug")] {
        std::fs::create_dir_all(place.parent().unwrap()).unwrap();
        std::fs::copy(&debug, &place).unwrap();
        let (names, counts, err) = symbolize(&input);
        assert_eq!(names, FUNCS, "debug file at {}: {err}", place.display());
        assert!(!counts.keys().any(|k| k.starts_with("unnamed")), "{counts:?}");
        std::fs::remove_file(&place).unwrap();
    }

    // /usr/lib/debug/.build-id/: through the debuglink, and for a binary
    // that has a build id but no debuglink.
    if util::skip_without_root("debugfile") {
        return;
    }
    assert!(!build_id_path.exists(), "{} already there", build_id_path.display());
    std::fs::create_dir_all(build_id_path.parent().unwrap()).unwrap();
    let _placed = Placed(build_id_path.clone());
    std::fs::copy(&debug, &build_id_path).unwrap();
    assert_eq!(symbolize(&input).0, FUNCS);
    let (names, _, err) = symbolize(&capture(&nolink));
    assert_eq!(names, FUNCS, "no debuglink: {err}");
}

/// A maps record with a relative path (scripts/bench-gen --binary NAME) is
/// taken from the current directory; one that is not there says so.
#[test]
fn relative_path_in_maps_record() {
    let dir = util::scratch("stacksym-relative");
    let (prog, _, debug, _) = build(&dir);
    std::fs::copy(&debug, dir.join("prog.debug")).unwrap();
    let input = capture(&prog).replace(&format!("\"{}\"", prog.display()), "\"prog\"");
    assert!(input.contains("\"path\":\"prog\""), "{input}");
    let run = |cwd: &Path| {
        let mut cmd = Command::new(util::bin("stacksym"));
        cmd.arg("--no-live").current_dir(cwd);
        util::run_cmd(&mut cmd, input.as_bytes())
    };
    let out = run(&dir);
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"func\":\"wcstrip_middle\""), "{}", String::from_utf8_lossy(&out.stderr));
    let out = run(Path::new("/"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("prog: relative path in a maps record, not found"), "{err}");
}
