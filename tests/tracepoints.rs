//! `tp:CATEGORY:NAME (FIELD, ...)`, as root: a kernel tracepoint's record
//! fields by name (read at the offsets of its format in tracefs, mounted
//! for the attach where it is not). tests/programs/tracepoints writes a
//! known sequence of (fd, count) to a dup'ed fd and says each on stderr;
//! the sys_enter_write events' fd and count must be exactly those, named
//! by the spec's name: template; a bad field or event is a one-line error
//! before the program runs.

mod util;

use std::process::Command;

use serde_json::Value;

#[test]
fn tracepoint_fields_are_what_the_program_wrote() {
    if util::skip_without_root("tracepoints") {
        return;
    }
    let dir = util::scratch("tracepoints");
    let prog = util::build_c("tests/programs/tracepoints/writes.c", &dir, "writes");
    let tracefs_before = std::path::Path::new("/sys/kernel/tracing/events").is_dir();
    let stream = dir.join("off.json");
    let out = Command::new(util::bin("offcputime"))
        .args(["--probe", "tp:syscalls:sys_enter_write (fd, count) | name:\"write {fd}\" |", "-o"])
        .arg(&stream)
        .arg("--")
        .arg(&prog)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let truth: Vec<(i64, i64)> = err
        .lines()
        .filter_map(|l| l.strip_prefix("wrote "))
        .map(|l| {
            let (f, n) = l.split_once(' ').unwrap();
            (f.parse().unwrap(), n.parse().unwrap())
        })
        .collect();
    assert_eq!(truth.len(), 12, "{err}");
    let text = std::fs::read_to_string(&stream).unwrap();
    let events: Vec<Value> = text.lines().filter(|l| l.starts_with("{\"type\":\"probe\"")).map(|l| serde_json::from_str(l).unwrap()).collect();
    let seen: Vec<(i64, i64)> = events
        .iter()
        .filter(|e| e["args"]["fd"] == 57)
        .map(|e| {
            assert_eq!(e["probe"], "write 57", "{e}");
            (e["args"]["fd"].as_i64().unwrap(), e["args"]["count"].as_i64().unwrap())
        })
        .collect();
    assert_eq!(seen, truth, "sys_enter_write's fd and count, in order");
    // Its stderr writes are there too, with fd 2.
    assert!(events.iter().any(|e| e["args"]["fd"] == 2), "no write to fd 2");
    assert_eq!(std::path::Path::new("/sys/kernel/tracing/events").is_dir(), tracefs_before, "tracefs left as it was");

    for (spec, says) in [
        ("tp:syscalls:sys_enter_write (fdx)", "no field 'fdx' (it has: __syscall_nr, fd, buf, count)"),
        ("tp:sched:sched_process_fork (parent_comm)", "is not an integer"),
        ("tp:nope:none (x)", "no tracepoint nope:none"),
    ] {
        let out = Command::new(util::bin("offcputime")).args(["--probe", spec, "--"]).arg(&prog).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{spec}: attached?");
        assert_eq!(err.trim().lines().count(), 1, "{spec}: one line (and the program never ran): {err}");
        assert!(err.contains(says) && err.contains(spec), "{spec}: {err}");
    }
}
