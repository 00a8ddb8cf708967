//! `scripts/install` into a temporary PREFIX: the card's line runs there
//! with bare names and sudo's default search path, man and bash find
//! what it put there, the installed tools find their companions without
//! the source tree, and `--uninstall` leaves nothing behind.

mod util;

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// sudo's default secure_path on Debian (sudoers(5), Debian's /etc/sudoers).
const SECURE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn sh(dir: &Path, path: &str, script: &str) -> Output {
    // No source tree and no build directory reachable: a clean environment.
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env_clear()
        .env("PATH", path)
        .env("HOME", dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    eprintln!("$ {script}\n{}", String::from_utf8_lossy(&out.stderr));
    out
}

fn ok(dir: &Path, path: &str, script: &str) -> String {
    let out = sh(dir, path, script);
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn install_runs_the_card_line_and_uninstalls_cleanly() {
    if util::skip_without_root("install") {
        return;
    }
    let dir = util::scratch("install");
    let prefix = dir.join("prefix");
    let install = util::root().join("scripts/install");
    let out = Command::new(&install).env("PREFIX", &prefix).output().unwrap();
    assert!(out.status.success(), "install: {}", String::from_utf8_lossy(&out.stderr));

    let path = format!("{}:{SECURE_PATH}", prefix.join("bin").display());
    // Bare names resolve to the installed tools, ahead of Debian's
    // libbpf-tools /usr/sbin/offcputime.
    for t in ["offcputime", "oncputime", "stacksym", "stackmerge", "flame", "wcreport", "wcexport", "gputrace", "wallclock"] {
        let found = ok(&dir, &path, &format!("command -v {t}"));
        assert_eq!(found.trim(), prefix.join("bin").join(t).to_str().unwrap(), "{t}");
    }

    // The card's line on a real process (with -d: a test cannot press Ctrl-C).
    let wl = util::build_demo(&dir);
    // Long enough for three captures on a loaded machine; killed after.
    let mut target = Command::new(&wl).arg("40").arg(dir.join("scratch.dat")).stdout(Stdio::null()).spawn().unwrap();
    let pid = target.id();
    ok(&dir, &path, &format!("oncputime -p {pid} -d 2 > on.txt"));
    ok(&dir, &path, &format!("offcputime -p {pid} -m 1000 -d 2 | stacksym | stackmerge --on on.txt | flame > out.svg"));
    // wallclock, installed, finds its tools beside it.
    ok(&dir, &path, &format!("wallclock -d 1 -o {}/w {pid}", dir.display()));
    let _ = target.kill();
    let _ = target.wait();
    let svg = std::fs::read_to_string(dir.join("out.svg")).unwrap();
    for f in ["compute_chunk", "nap", &format!("workload ({pid})")] {
        assert!(svg.contains(&format!("<title>{f} (")), "the card's SVG has no frame {f}");
    }
    assert!(dir.join("w.svg").is_file(), "installed wallclock wrote no w.svg");

    // gputrace finds the injection library in PREFIX/lib/wallclock.
    let out = sh(&dir, &path, "gputrace -- true");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !err.contains("missing"), "gputrace: {err}");

    // man renders the pages, sections 1 and 5.
    let page = ok(&dir, &path, &format!("MANWIDTH=80 man -P cat -M {}/share/man offcputime", prefix.display()));
    assert!(page.contains("NAME") && page.contains("offcputime") && page.contains("SYNOPSIS"), "man offcputime: {page}");
    let page = ok(&dir, &path, &format!("MANWIDTH=80 man -P cat -M {}/share/man 5 wallclock-stream", prefix.display()));
    assert!(page.contains("wallclock-stream"), "man 5 wallclock-stream: {page}");

    // bash-completion's loader finds the completions (PREFIX/share through XDG_DATA_DIRS, as /usr/local/share is).
    let spec = ok(
        &dir,
        &path,
        &format!(
            "export XDG_DATA_DIRS={}/share:/usr/share; . /usr/share/bash-completion/bash_completion; _completion_loader flame; complete -p flame",
            prefix.display()
        ),
    );
    assert!(spec.contains("flame"), "no completion for flame: {spec}");

    let out = Command::new(&install).arg("--uninstall").env("PREFIX", &prefix).output().unwrap();
    assert!(out.status.success(), "uninstall: {}", String::from_utf8_lossy(&out.stderr));
    let left: Vec<_> = walk(&prefix);
    assert!(left.is_empty() && !prefix.exists(), "left behind: {left:?}");
}

fn walk(p: &Path) -> Vec<std::path::PathBuf> {
    let Ok(rd) = std::fs::read_dir(p) else { return Vec::new() };
    rd.flatten().flat_map(|e| {
        let mut v = vec![e.path()];
        v.extend(walk(&e.path()));
        v
    }).collect()
}
