//! What the runtime tests share: a program profiled end to end by
//! `scripts/wallclock -- COMMAND` or attached to by `scripts/wallclock
//! PID`, its merged stream read back per thread, its report and stderr
//! kept.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::util;

/// One stack of the merged stream.
pub struct Stack {
    pub kind: String,
    pub pid: u64,
    pub tid: u64,
    pub frames: Vec<String>,
    pub ns: u64,
}

impl Stack {
    /// The stack that stands for a thread's steal (see `Run::on_cpu`).
    pub fn is_steal(&self) -> bool {
        self.frames == [wallclock_stream::accounting::STEAL_FRAME]
    }
}

/// A profiled run: what the program printed, what wallclock said, the
/// thread names by tid, the stacks and the report's text.
pub struct Run {
    pub stdout: String,
    pub stderr: String,
    pub comms: HashMap<u64, String>,
    pub stacks: Vec<Stack>,
    pub report: String,
}

impl Run {
    /// The on-CPU stacks of the threads named `comm`: the time they ran.
    /// Not their `[steal]` stack, the part of their on-CPU time a busy
    /// host's hypervisor took from the vCPU, in no function: counted in,
    /// JVM spinners with 8.6% and 10.6% of their on-CPU time in `[steal]`
    /// were "87.8%" and "87.7% whole and named" (90 asked) in a fresh run
    /// here, their heaviest stacks whole.
    pub fn on_cpu<'a>(&'a self, comm: &'a str) -> impl Iterator<Item = &'a Stack> + 'a {
        self.stacks.iter().filter(move |s| s.kind == "on" && !s.is_steal() && self.comms.get(&s.tid).map(String::as_str) == Some(comm))
    }

    /// Of the on-CPU time of the threads named `comm`, the percentage in
    /// stacks for which `pred` holds.
    pub fn on_cpu_pct(&self, comm: &str, pred: impl Fn(&Stack) -> bool) -> f64 {
        let all: u64 = self.on_cpu(comm).map(|s| s.ns).sum();
        let yes: u64 = self.on_cpu(comm).filter(|s| pred(s)).map(|s| s.ns).sum();
        assert!(all > 0, "no on-CPU time for thread {comm}");
        yes as f64 * 100.0 / all as f64
    }

    /// The heaviest on-CPU stacks of `comm`, for failure messages.
    pub fn top(&self, comm: &str) -> String {
        let mut v: Vec<&Stack> = self.on_cpu(comm).collect();
        v.sort_by_key(|s| std::cmp::Reverse(s.ns));
        v.iter().take(5).map(|s| format!("{} {}\n", s.ns, s.frames.join(";"))).collect()
    }
}

/// The time of the stacks `pred` keeps.
pub fn ns(v: &[&Stack], pred: impl Fn(&Stack) -> bool) -> u64 {
    v.iter().filter(|s| pred(s)).map(|s| s.ns).sum()
}

/// The five heaviest stacks `pred` keeps, a line each (for a failure's message).
pub fn top(v: &[&Stack], pred: impl Fn(&Stack) -> bool) -> String {
    let mut v: Vec<&&Stack> = v.iter().filter(|s| pred(s)).collect();
    v.sort_by_key(|s| std::cmp::Reverse(s.ns));
    v.iter().take(5).map(|s| format!("{} {} {}\n", s.kind, s.ns, s.frames.join(";"))).collect()
}

/// Run `scripts/wallclock -f 199 -o DIR/p -- cmd...` and read its outputs.
pub fn profile(dir: &Path, cmd: &[&str]) -> Run {
    let prefix = dir.join("p");
    let out = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["-F", "199", "--prefix"])
        .arg(&prefix)
        .arg("--")
        .args(cmd)
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .output()
        .expect("run scripts/wallclock");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "wallclock -- {cmd:?} failed: {stderr}");
    read_run(dir, String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// `scripts/wallclock -f 199 -d SECS -o DIR/p PID` run, its output as it
/// ended (a caller stops its target before reading it: `read_attached`).
pub fn run_attached(dir: &Path, pid: u32, secs: u32) -> std::process::Output {
    std::fs::create_dir_all(dir).unwrap();
    Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["-F", "199", "-d", &secs.to_string(), "--prefix"])
        .arg(dir.join("p"))
        .arg(pid.to_string())
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .output()
        .expect("run scripts/wallclock")
}

/// What `run_attached` wrote, read back as `profile` reads a launch; the
/// capture must have succeeded.
pub fn read_attached(dir: &Path, out: std::process::Output) -> Run {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "wallclock PID failed: {stderr}");
    read_run(dir, String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// `scripts/wallclock -f 199 -d SECS -o DIR/p PID`, read back.
pub fn attach(dir: &Path, pid: u32, secs: u32) -> Run {
    read_attached(dir, run_attached(dir, pid, secs))
}

/// The outputs of `scripts/wallclock -o DIR/p ...`, with what it said.
pub fn read_run(dir: &Path, stdout: String, stderr: String) -> Run {
    let prefix = dir.join("p");
    let stream = util::resolved(&std::fs::read_to_string(prefix.with_extension("stream")).unwrap());
    let recs: Vec<Value> = stream.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let comms = recs
        .iter()
        .filter(|r| r["type"] == "thread")
        .map(|r| (r["tid"].as_u64().unwrap(), r["comm"].as_str().unwrap_or("").to_string()))
        .collect();
    let stacks = recs
        .iter()
        .filter(|r| r["type"] == "stack")
        .map(|r| Stack {
            kind: r["kind"].as_str().unwrap().to_string(),
            pid: r["pid"].as_u64().unwrap(),
            tid: r["tid"].as_u64().unwrap(),
            frames: r["frames"].as_array().map_or(Vec::new(), |a| a.iter().map(|f| f["func"].as_str().unwrap_or("").to_string()).collect()),
            ns: r["ns"].as_u64().unwrap(),
        })
        .collect();
    let report = ["_thread_analysis.txt", "_single_thread_analysis.txt"]
        .iter()
        .find_map(|s| std::fs::read_to_string(dir.join(format!("p{s}"))).ok())
        .expect("a report");
    Run { stdout, stderr, comms, stacks, report }
}

/// Is `prog` on PATH? Fails the test when not (scripts/setup --tests
/// installs it), unless WALLCLOCK_SKIP_RUNTIMES=1 asks to skip.
pub fn have(prog: &str, package: &str) -> bool {
    let ok = Command::new("sh").args(["-c", &format!("command -v {prog}")]).output().is_ok_and(|o| o.status.success());
    if !ok {
        util::missing(&format!("{prog} is not installed"), &format!("scripts/setup --tests installs {package}"), "WALLCLOCK_SKIP_RUNTIMES");
    }
    ok
}

/// Debian forky's chroot (target/chroot-forky, which scripts/setup
/// --tests makes), when it has `bin` in /usr/bin (said when it has not).
pub fn forky(bin: &str, package: &str) -> Option<std::path::PathBuf> {
    debian_chroot("forky", bin, package)
}

/// Debian's (or Ubuntu's) `suite`'s chroot (target/chroot-SUITE, which scripts/setup
/// --tests makes), when it has `bin` in /usr/bin (said when it has not).
pub fn debian_chroot(suite: &str, bin: &str, package: &str) -> Option<std::path::PathBuf> {
    let dir = util::root().join(format!("target/chroot-{suite}"));
    if !dir.join("usr/bin").join(bin).exists() {
        let how = format!("scripts/setup --tests makes it (scripts/chroot make {suite} {package})");
        util::missing(&format!("no {bin} in {}", dir.display()), &how, "WALLCLOCK_SKIP_CHROOT");
        return None;
    }
    Some(dir)
}

/// `wallclock -f 199 PID`, no flag, on `program` (a file of
/// tests/programs) run by `interp` inside the chroot at `root`
/// as `interp PROGRAM SECONDS GO`, attached by its host pid (see
/// `attach_cmd_in_chroot`).
pub fn attach_in_chroot(name: &str, root: &Path, interp: &str, program: &str, secs: &str) -> Run {
    attach_cmd_in_chroot(name, root, |there, inside| {
        let file = Path::new(program).file_name().unwrap().to_str().unwrap().to_string();
        std::fs::copy(util::root().join(program), there.join(&file)).unwrap();
        vec![interp.to_string(), format!("{inside}/{file}"), secs.to_string(), format!("{inside}/go")]
    })
}

/// `wallclock -F 199 PID`, no flag, on `program` (a file of
/// tests/programs) run by the interpreter at `interp` (relative to the
/// repository: one built from source by scripts/`builder`, which
/// scripts/setup --tests runs) as `interp PROGRAM SECONDS GO` with `env`,
/// attached by its pid (see `attach_go`); with its scratch folder. None,
/// said, where it is not built.
pub fn attach_built(name: &str, interp: &str, builder: &str, program: &str, secs: &str, env: &[(&str, &str)]) -> Option<(Run, std::path::PathBuf)> {
    let bin = util::root().join(interp);
    if !bin.exists() {
        util::missing(&format!("no {}", bin.display()), &format!("scripts/setup --tests builds it (scripts/{builder})"), "WALLCLOCK_SKIP_RUNTIMES");
        return None;
    }
    let dir = util::scratch(name);
    let there = dir.join("prog");
    std::fs::create_dir_all(&there).unwrap();
    let mut cmd = Command::new(&bin);
    cmd.arg(util::root().join(program)).arg(secs).arg(there.join("go")).envs(env.iter().copied());
    let r = attach_go(&dir, cmd, &there, interp);
    Some((r, dir))
}

/// Waits (`most` at most) until `pid` has exec'd past the shells and
/// launchers that start a program (`scripts/chroot run`'s unshare and
/// chroot, erl's script, erlexec), so that a test attaches to the program
/// as a user attaches to one that runs. A capture attached among those
/// execs is a case of its own (a container's entry point caught
/// starting): it let a VM's first stacks be copied before its image was
/// known and failed a scheduler's whole-stack share.
pub fn past_launchers(pid: u32, most: std::time::Duration) {
    let launchers = ["bash", "sh", "dash", "unshare", "chroot", "erlexec"];
    let exe = || std::fs::read_link(format!("/proc/{pid}/exe")).ok().and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    let until = std::time::Instant::now() + most;
    while exe().is_some_and(|n| launchers.contains(&n.as_str())) && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `wallclock -f 199 PID`, no flag, on the command `prepare` returns, run
/// inside the chroot at `root` (target/chroot-SUITE, `scripts/chroot run
/// SUITE`: its own mount namespace and root, as in a container) and
/// attached by its host pid once it has exec'd past its launchers (the
/// shells, unshare, chroot, erlexec). `prepare` gets a scratch folder, as the host
/// and as the chroot see it (`/tmp/wc-test-NAME`), to put the program's
/// files in; the program waits for the file `go` there, written once both
/// capture tools are attached, and the capture ends with it.
pub fn attach_cmd_in_chroot(name: &str, root: &Path, prepare: impl FnOnce(&Path, &str) -> Vec<String>) -> Run {
    let dir = util::scratch(name);
    let suite = root.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_prefix("chroot-")).expect("a target/chroot-SUITE folder").to_string();
    let inside = format!("/tmp/wc-test-{name}");
    let there = root.join(&inside[1..]);
    let _ = std::fs::remove_dir_all(&there);
    std::fs::create_dir_all(&there).unwrap();
    let argv = prepare(&there, &inside);
    let mut cmd = Command::new(util::root().join("scripts/chroot"));
    cmd.args(["run", &suite]).args(&argv);
    let r = attach_go(&dir, cmd, &there, &format!("{argv:?} in {}", root.display()));
    let _ = std::fs::remove_dir_all(&there);
    r
}

/// `wallclock -F 199 PID`, no flag, on the program `cmd` starts (`what`
/// in errors), attached by pid once it has exec'd past its launchers;
/// the program waits for the file `go` in `there`, written once both
/// capture tools are attached, and the capture ends with it. Its
/// stream and report go in `dir`.
pub fn attach_go(dir: &Path, mut cmd: Command, there: &Path, what: &str) -> Run {
    use std::io::{BufRead, BufReader, Read};
    use std::process::Stdio;
    let prefix = dir.join("p");
    let target = cmd.stdout(Stdio::piped()).spawn().unwrap_or_else(|e| panic!("start {what}: {e}"));
    past_launchers(target.id(), std::time::Duration::from_secs(20));
    let mut child = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["-F", "199", "--prefix"])
        .arg(&prefix)
        .args(["-d", "60", &target.id().to_string()])
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("wallclock: capturing") {
        let mut l = String::new();
        assert!(err.read_line(&mut l).unwrap() > 0, "wallclock ended before capturing: {said}");
        said.push_str(&l);
    }
    std::fs::write(there.join("go"), "").unwrap();
    let out = target.wait_with_output().unwrap();
    assert!(out.status.success(), "{what} failed");
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success(), "wallclock PID failed: {said}{rest}");
    read_run(dir, String::from_utf8_lossy(&out.stdout).into_owned(), format!("{said}{rest}"))
}

/// The capture's stats counts, both capture tools' summed (the merged
/// stream's `stats` records).
pub fn stats(dir: &Path) -> HashMap<String, u64> {
    let stream = std::fs::read_to_string(dir.join("p.stream")).unwrap();
    let mut m = HashMap::new();
    for v in stream.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v["type"] == "stats") {
        for (k, n) in v["counts"].as_object().into_iter().flatten() {
            *m.entry(k.clone()).or_default() += n.as_u64().unwrap_or(0);
        }
    }
    m
}
