//! A command that execs into another root during the capture (as a
//! container's entrypoint does): its stacks are read against its own
//! files, not the host's at the same paths. The kernel's mmap records
//! name a file as the process sees it (`/usr/lib/x86_64-linux-gnu/libc.so.6`
//! inside Debian 13's root is its glibc 2.41, here Debian 12's 2.36); the
//! capture finds it under the process's root. Independent reader: the
//! build ids readelf prints for the chroot's files.
//!
//! Debian trixie's chroot (target/chroot-trixie, made by scripts/setup
//! --tests for the Erlang tests); root (BPF).

mod runtime_common;
mod util;

use std::process::Command;

/// What readelf says is the GNU build id of `path`.
fn build_id(path: &std::path::Path) -> String {
    let out = Command::new("readelf").arg("-n").arg(path).output().expect("readelf (binutils)");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).unwrap_or_else(|| panic!("no build id in {}: {text}", path.display())).to_string()
}

#[test]
fn a_command_execd_in_a_chroot_is_read_against_the_chroots_files() {
    if util::skip_without_root("capture") {
        return;
    }
    let Some(root) = runtime_common::debian_chroot("trixie", "erl", "erlang-base") else { return };
    let root = root.canonicalize().unwrap();
    let out = Command::new(util::bin("offcputime"))
        .arg("--")
        .arg(util::root().join("scripts/chroot"))
        .args(["run", "trixie", "/usr/bin/sleep", "0.3"])
        .output()
        .expect("offcputime");
    assert!(out.status.success(), "offcputime failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let libc_in = root.join("usr/lib/x86_64-linux-gnu/libc.so.6");
    let (sleep_in, libc_id, host_libc_id) = (root.join("usr/bin/sleep"), build_id(&libc_in), build_id(std::path::Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6")));
    assert_ne!(libc_id, host_libc_id, "the chroot's libc is the host's: nothing to tell apart");
    // The process that ran the chroot's sleep (the launcher's pid, after
    // its execs through unshare and chroot).
    let maps: Vec<serde_json::Value> = text.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).filter(|v| v["type"] == "maps").collect();
    let paths = |v: &serde_json::Value| -> Vec<(String, String)> {
        v["maps"].as_array().unwrap().iter().map(|m| (m["path"].as_str().unwrap_or("").to_string(), m["build_id"].as_str().unwrap_or("").to_string())).collect()
    };
    let sleeper = maps.iter().find(|v| paths(v).iter().any(|(p, _)| std::path::Path::new(p) == sleep_in)).unwrap_or_else(|| {
        panic!("no process mapped {} (the chroot's sleep): {:?}", sleep_in.display(), maps.iter().map(paths).collect::<Vec<_>>())
    });
    let files = paths(sleeper);
    // Its libc as the chroot's, with the chroot's libc's build id; never
    // the host's build id at a path of the chroot, nor the host's path
    // with the chroot's build id.
    assert!(
        files.iter().any(|(p, id)| std::path::Path::new(p) == libc_in && *id == libc_id),
        "the chroot's libc ({}, build id {libc_id}) is not among the sleep process's files: {files:?}",
        libc_in.display()
    );
    for (p, id) in &files {
        let in_root = std::path::Path::new(p).starts_with(&root);
        assert!(!in_root || *id != host_libc_id, "{p} has the host libc's build id: {files:?}");
        assert!(in_root || *id != libc_id, "{p} (a host path) has the chroot libc's build id: {files:?}");
    }
}
