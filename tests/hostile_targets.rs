//! A target that fights back: a JIT-like program (tests/programs/hostile/
//! jitlike.c: code copied into anonymous memory, called from native code)
//! run as the unprivileged user `nobody`, its own /tmp/perf-PID.map made,
//! in turn, a link to /dev/zero, a link to a root-only file of perf-map
//! lines naming a secret symbol, a fifo, a 2 GB sparse file, and a map
//! older than the process (an earlier process's with the same pid). Each
//! `scripts/wallclock PID -d 2` (as root) must finish in about the time
//! of a capture of the same program with a good map, every tool's peak
//! RSS under 200 MB (/usr/bin/time -v: the largest of the processes it
//! waited for), name nothing from the root-only file, say once why the
//! map was skipped, and write the rest of the profile: the native
//! functions are named. The good map names the JIT code (`jit_hot`), so
//! the test sees the difference.
//!
//! Root (BPF, setpriv) is needed; the test skips, saying so, without it.

mod util;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use serde_json::Value;

const SECRET: &str = "SECRET_ROOT_ONLY_SYMBOL";

/// The program built where `nobody` can run it.
fn build(name: &str) -> PathBuf {
    let dir = PathBuf::from(format!("/tmp/wc-hostile-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    util::build_c("tests/programs/hostile/jitlike.c", &dir, "jitlike")
}

struct Target {
    child: Child,
    pid: u32,
}

impl Target {
    /// `jitlike MODE ARGS` as nobody, once its map is in place.
    fn start(exe: &Path, mode: &[&str]) -> Target {
        // A pid met before on this machine may have a map of another
        // user's left at /tmp/perf-PID.map, which nobody cannot replace in
        // the sticky /tmp: the program then says so and exits; a new
        // process (a new pid) is tried.
        let mut why = String::new();
        for _ in 0..5 {
            let mut child = Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(exe)
                .args(mode)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("setpriv");
            let mut line = String::new();
            BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
            if let Ok(pid) = line.trim().parse() {
                return Target { child, pid };
            }
            why.clear();
            child.stderr.take().unwrap().read_to_string(&mut why).unwrap();
            let _ = child.wait();
            assert!(why.contains("/tmp/perf-"), "jitlike {mode:?} printed {line:?}: {why}");
        }
        panic!("jitlike {mode:?}: five pids in a row had another user's map: {why}")
    }

    fn map(&self) -> PathBuf {
        PathBuf::from(format!("/tmp/perf-{}.map", self.pid))
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(self.map());
    }
}

/// What one capture gave.
struct Capture {
    secs: f64,
    max_rss_kb: u64,
    stderr: String,
    /// The target's stacks: frame names and time.
    stacks: Vec<(Vec<String>, u64)>,
    /// Every output file's text, for the secret.
    outputs: String,
}

impl Capture {
    fn time_in(&self, func: &str) -> u64 {
        self.stacks.iter().filter(|(f, _)| f.iter().any(|x| x == func)).map(|(_, ns)| ns).sum()
    }
}

fn capture(name: &str, pid: u32) -> Capture {
    let dir = util::scratch(name);
    let prefix = dir.join("p");
    let t0 = Instant::now();
    let out = Command::new("/usr/bin/time")
        .arg("-v")
        .arg("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["-d", "2", "-F", "99", "--prefix"])
        .arg(&prefix)
        .arg(pid.to_string())
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .output()
        .expect("run scripts/wallclock");
    let secs = t0.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "wallclock {pid} ({name}) failed: {stderr}");
    let max_rss_kb = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("Maximum resident set size (kbytes):"))
        .and_then(|v| v.trim().parse().ok())
        .expect("/usr/bin/time -v's maximum RSS");
    let stream = util::resolved(&std::fs::read_to_string(prefix.with_extension("stream")).unwrap());
    let stacks = stream
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["type"] == "stack" && r["pid"].as_u64() == Some(pid as u64))
        .map(|r| {
            let frames = r["frames"].as_array().map_or(Vec::new(), |a| a.iter().map(|f| f["func"].as_str().unwrap_or("").to_string()).collect());
            (frames, r["ns"].as_u64().unwrap_or(0))
        })
        .collect();
    let mut outputs = stream;
    for e in walk(&dir) {
        outputs.push_str(&String::from_utf8_lossy(&std::fs::read(e).unwrap_or_default()));
    }
    Capture { secs, max_rss_kb, stderr, stacks, outputs }
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The lines of stderr that say the map of `pid` was skipped.
fn skip_lines(c: &Capture, pid: u32) -> Vec<String> {
    let name = format!("perf-{pid}.map: skipped: ");
    c.stderr.lines().filter(|l| l.contains(&name)).map(str::to_string).collect()
}

/// The rest of the profile: the native functions named, on and off CPU.
fn assert_rest_written(c: &Capture, what: &str) {
    assert!(c.time_in("native_driver") > 0, "{what}: no time under native_driver:\n{}", c.stderr);
    assert!(c.time_in("native_nap") > 0, "{what}: no time under native_nap:\n{}", c.stderr);
}

#[test]
fn hostile_perf_maps_are_skipped_and_the_profile_is_written() {
    if util::skip_without_root("hostile target") {
        return;
    }
    let exe = build("maps");
    // The reference: a good map, its JIT code named.
    let good = Target::start(&exe, &["good"]);
    let base = capture("hostile_good", good.pid);
    drop(good);
    assert!(base.time_in("jit_hot") > 0, "the good map did not name jit_hot:\n{}", base.stderr);
    assert_rest_written(&base, "good map");
    // Its names are used: no warning says it could not be parsed.
    assert!(!base.stderr.contains("failed to parse perf map") && !base.stderr.contains("skipped"), "good map:\n{}", base.stderr);
    eprintln!("good map: {:.1} s, peak RSS {} MB", base.secs, base.max_rss_kb / 1024);

    // A root-only file of perf-map lines covering the JIT code.
    let secret = PathBuf::from(format!("/tmp/wc-hostile-secret-{}", std::process::id()));
    let cases: Vec<(&str, Vec<String>, &str)> = vec![
        ("devzero", vec!["devzero".into()], "symbolic link"),
        ("rootonly", vec!["link".into(), secret.display().to_string()], "symbolic link"),
        ("fifo", vec!["fifo".into()], "fifo"),
        ("sparse", vec!["sparse".into()], "more than"),
        ("stale", vec!["stale".into()], "older than process"),
    ];
    for (name, args, why) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let t = Target::start(&exe, &args);
        if name == "rootonly" {
            // Written once the target runs, so that its lines cover the
            // JIT code of this very process (read from its maps).
            let maps = std::fs::read_to_string(format!("/proc/{}/maps", t.pid)).unwrap();
            let anon: Vec<u64> = maps
                .lines()
                .filter(|l| l.split_whitespace().nth(1).is_some_and(|p| p.contains('x')) && l.split_whitespace().count() == 5)
                .map(|l| u64::from_str_radix(l.split('-').next().unwrap(), 16).unwrap())
                .collect();
            assert!(!anon.is_empty(), "no anonymous executable mapping in the target:\n{maps}");
            let lines: String = anon.iter().map(|a| format!("{a:x} 1000 {SECRET}\n")).collect();
            std::fs::write(&secret, lines).unwrap();
            std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let pid = t.pid;
        let c = capture(&format!("hostile_{name}"), pid);
        drop(t);
        let said = skip_lines(&c, pid);
        eprintln!("{name}: {:.1} s, peak RSS {} MB; said: {said:?}", c.secs, c.max_rss_kb / 1024);
        assert!(c.max_rss_kb < 200 * 1024, "{name}: peak RSS {} MB (200 MB at most)", c.max_rss_kb / 1024);
        // Its normal time: the good map's, with room for a loaded machine.
        let normal = (base.secs * 2.0).max(base.secs + 10.0);
        assert!(c.secs <= normal, "{name}: {:.1} s, the good map's capture took {:.1} s", c.secs, base.secs);
        assert!(!c.outputs.contains(SECRET) && !c.stderr.contains(SECRET), "{name}: the root-only file was read");
        // One line, saying why.
        assert!(said.len() == 1 && said[0].contains(why), "{name}: not said once why ({why}):\n{}", c.stderr);
        assert!(!c.stderr.contains("does not cover"), "{name}: a skipped map is said to be read:\n{}", c.stderr);
        assert!(!c.stderr.contains("failed to parse perf map"), "{name}:\n{}", c.stderr);
        assert_eq!(c.time_in("jit_hot"), 0, "{name}: a skipped map named jit_hot");
        assert_rest_written(&c, name);
    }
    let _ = std::fs::remove_file(&secret);
    let _ = std::fs::remove_dir_all(exe.parent().unwrap());
}
