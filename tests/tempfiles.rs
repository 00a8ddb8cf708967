//! Temporary files: stacksym names `[vdso]` frames from a copy of its own
//! vDSO. It wrote that copy to `$TMPDIR/wallclock-stacksym-vdso-PID.so`,
//! a name anyone could predict, through whatever stood there (as root,
//! under `sudo scripts/wallclock`, a planted link made it overwrite the
//! link's target), and left it behind at every exit. Here a link is
//! planted at that name before stacksym starts, in a private TMPDIR: the
//! link's target must be untouched, the frame still named, and nothing of
//! the tools' left in the folder after they exit.

mod util;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;
use util::{bin, scratch};

/// This process's vDSO: (start, end) in /proc/self/maps.
fn own_vdso() -> (u64, u64) {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let line = maps.lines().find(|l| l.ends_with("[vdso]")).expect("a [vdso] mapping");
    let (a, b) = line.split_whitespace().next().unwrap().split_once('-').unwrap();
    (u64::from_str_radix(a, 16).unwrap(), u64::from_str_radix(b, 16).unwrap())
}

/// The offset of `clock_gettime` in the vDSO image (as `nm -D` reads a copy of it).
fn clock_gettime_offset(dir: &Path, (start, end): (u64, u64)) -> u64 {
    // SAFETY: the kernel maps the vDSO readable at exactly this range.
    let image = unsafe { std::slice::from_raw_parts(start as *const u8, (end - start) as usize) };
    let copy = dir.join("vdso.so");
    std::fs::write(&copy, image).unwrap();
    let out = Command::new("nm").arg("-D").arg(&copy).output().expect("run nm (binutils)");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains(" __vdso_clock_gettime@")).unwrap_or_else(|| panic!("no clock_gettime in the vDSO:\n{text}"));
    u64::from_str_radix(line.split_whitespace().next().unwrap(), 16).unwrap()
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn stacksym_writes_through_no_planted_link_and_leaves_nothing() {
    let d = scratch("tempfiles");
    let tmp = d.join("tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let victim = d.join("victim");
    std::fs::write(&victim, b"precious\n").unwrap();

    // A stream of a process (gone) whose one stack is in the vDSO.
    let (start, end) = own_vdso();
    let off = clock_gettime_offset(&d, (start, end));
    let stream = format!(
        "{{\"type\":\"header\",\"format\":\"wallclock\",\"version\":\"1.3\",\"tool\":\"test\",\"tool_version\":\"0\",\"pids\":[4242],\"clock\":\"monotonic\"}}\n\
         {{\"type\":\"maps\",\"pid\":4242,\"maps\":[{{\"start\":{start},\"end\":{end},\"offset\":0,\"path\":\"[vdso]\"}}]}}\n\
         {{\"type\":\"stack\",\"kind\":\"off\",\"state\":\"S\",\"pid\":4242,\"tid\":4242,\"ustack\":[{}],\"ns\":1000,\"count\":1}}\n",
        start + off
    );

    // stacksym started held (a shell that execs it once told to), so that
    // its pid is known and the link planted before it runs.
    let mut child = Command::new("sh")
        .args(["-c", "read go; exec \"$0\" --no-live"])
        .arg(bin("stacksym"))
        .env("TMPDIR", &tmp)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let planted = format!("wallclock-stacksym-vdso-{pid}.so");
    std::os::unix::fs::symlink(&victim, tmp.join(&planted)).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    stdin.write_all(stream.as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "stacksym failed: {}", String::from_utf8_lossy(&out.stderr));

    assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n", "the link's target was written");
    assert_eq!(entries(&tmp), vec![planted.clone()], "stacksym left files in TMPDIR");
    // The vDSO frame is still named.
    let text = String::from_utf8(out.stdout).unwrap();
    let funcs: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "frame")
        .map(|v| v["frame"]["func"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(funcs.iter().any(|f| f.contains("clock_gettime")), "the [vdso] frame unnamed: {funcs:?}");

    // The rest of the pipeline, in the same TMPDIR, leaves nothing either.
    for (tool, args) in [("stackmerge", vec!["--folded"]), ("flame", vec![]), ("wcreport", vec!["--json"])] {
        let o = util::run_cmd(Command::new(bin(tool)).args(&args).env("TMPDIR", &tmp), text.as_bytes());
        assert!(o.status.success(), "{tool}: {}", String::from_utf8_lossy(&o.stderr));
    }
    assert_eq!(entries(&tmp), vec![planted], "the tools left files in TMPDIR");
}
