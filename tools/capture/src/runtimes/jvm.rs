//! JVM targets: the JIT's symbol map, asked of the running JVM, so that
//! Java methods are named without restarting it with extra flags.
//!
//! HotSpot (JDK 17+) writes `/tmp/perf-PID.map` (every code blob: compiled
//! methods, the interpreter, stubs) on the diagnostic command
//! `Compiler.perfmap`, what `jcmd PID Compiler.perfmap` sends. We send it
//! ourselves through the JVM's attach mechanism, as jcmd does: no JVM is
//! started beside the target (jcmd costs half a second of CPU each time,
//! and it is in the JDK, not in the JRE a server may run).
//!
//! The attach mechanism on Linux: a file `.attach_pidN` in the JVM's
//! working directory (or its /tmp) and a SIGQUIT make the JVM start its
//! "Attach Listener" thread, which listens on the socket `/tmp/.java_pidN`;
//! a request is `1\0jcmd\0COMMAND\0\0\0`, the answer a status line and the
//! command's output. N is the pid as the JVM knows it (in its own pid
//! namespace), and its /tmp is reached through /proc/PID/root.
//!
//! The map is a snapshot: methods compiled later are not in it. So it is
//! asked for while the JVM runs (0.5 s after it is first seen, then at
//! growing intervals) and once more at the stop, for a JVM still alive.

use std::collections::HashMap;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wallclock_stream::safe_open;

/// How long a JVM may take to open its attach socket after the SIGQUIT.
const ATTACH_WAIT: Duration = Duration::from_secs(3);
/// The longest gap between two requests while a JVM runs.
const MAX_GAP: Duration = Duration::from_secs(8);

/// The JVMs among the targets and their map requests.
#[derive(Default)]
pub struct Jvms {
    procs: HashMap<u32, Jvm>,
    /// Requests under way (one per JVM at a time).
    running: Vec<(u32, JoinHandle<Result<(), String>>)>,
    last_scan: Option<Instant>,
}

struct Jvm {
    /// Is it a HotSpot JVM (libjvm.so mapped)? Checked again until it is:
    /// a launched command becomes java only at its exec.
    is_jvm: bool,
    next: Option<Instant>,
    gap: Duration,
    /// A map was written at least once.
    ok: bool,
    error: Option<String>,
}

impl Jvms {
    /// Called at every turn of the capture loop: look for JVMs among
    /// `pids` (once a second) and ask those due for their map.
    pub fn tick(&mut self, pids: &[u32]) {
        self.reap(false);
        let now = Instant::now();
        if self.last_scan.is_some_and(|t| now.duration_since(t) < Duration::from_secs(1)) {
            return;
        }
        self.last_scan = Some(now);
        for &pid in pids {
            let j = self.procs.entry(pid).or_insert(Jvm { is_jvm: false, next: None, gap: Duration::from_secs(1), ok: false, error: None });
            if !j.is_jvm {
                j.is_jvm = is_jvm(pid);
                // Its signal handlers are not set at once: a SIGQUIT
                // before then would kill it (see `ready`).
                j.next = j.is_jvm.then(|| now + Duration::from_millis(500));
            }
            if j.next.is_some_and(|t| now >= t) && !self.running.iter().any(|(p, _)| *p == pid) {
                j.next = Some(now + j.gap);
                j.gap = (j.gap * 2).min(MAX_GAP);
                self.running.push((pid, std::thread::spawn(move || request_perf_map(pid))));
            }
        }
    }

    /// The capture stopped: one last map of every JVM still running
    /// (its methods compiled since the last one), without waiting.
    pub fn at_stop(&mut self, pids: &[u32]) {
        self.reap(true);
        for &pid in pids {
            let j = self.procs.entry(pid).or_insert(Jvm { is_jvm: false, next: None, gap: Duration::ZERO, ok: false, error: None });
            j.is_jvm = j.is_jvm || is_jvm(pid);
            if j.is_jvm && crate::procfs::exists(pid) {
                self.running.push((pid, std::thread::spawn(move || request_perf_map(pid))));
            }
        }
    }

    /// Wait for the requests under way; say once per JVM on stderr when
    /// none of its maps could be had (its JIT frames stay unnamed).
    pub fn finish(&mut self, tool: &str) {
        self.reap(true);
        for (pid, j) in &self.procs {
            if j.is_jvm && !j.ok {
                let why = j.error.as_deref().unwrap_or("it exited before it could be asked");
                eprintln!("{tool}: warning: pid {pid} (JVM): no JIT symbol map (Compiler.perfmap): {why}; its Java methods stay unnamed (or start it with -XX:+DumpPerfMapAtExit)");
            }
        }
    }

    fn reap(&mut self, wait: bool) {
        let mut i = 0;
        while i < self.running.len() {
            if !wait && !self.running[i].1.is_finished() {
                i += 1;
                continue;
            }
            let (pid, h) = self.running.swap_remove(i);
            let res = h.join().unwrap_or_else(|_| Err("the request failed".into()));
            if let Some(j) = self.procs.get_mut(&pid) {
                match res {
                    Ok(()) => j.ok = true,
                    Err(e) => j.error = Some(e),
                }
            }
        }
    }
}

/// A HotSpot JVM maps libjvm.so.
fn is_jvm(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.lines().any(|l| l.ends_with("/libjvm.so")))
}

/// The pid as the process knows it (the last of NSpid: its own namespace).
pub(crate) fn ns_pid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// Does the process catch SIGQUIT yet? Before the JVM sets its handlers
/// the signal's default action would end it.
fn catches_sigquit(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return false };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|m| m & (1 << (libc::SIGQUIT - 1)) != 0)
}

/// The JVM's attach socket, if it is one its user made (no link, nothing
/// of another user's: the capture runs as root and writes to it).
fn socket(pid: u32, ns: u32) -> Result<Option<OwnedFd>, String> {
    safe_open::socket_in_root(pid, &format!("/tmp/.java_pid{ns}"), safe_open::owner_of(pid)).map_err(|s| s.to_string())
}

/// Ask the JVM `pid` to write its perf map; the error says why not.
pub fn request_perf_map(pid: u32) -> Result<(), String> {
    let out = jcmd(pid, "Compiler.perfmap")?;
    // The status line is 0 when the command ran; its output says more.
    match out.split_once('\n') {
        Some(("0", _)) => Ok(()),
        _ => Err(format!("the JVM answered: {}", out.trim().replace('\n', " "))),
    }
}

/// Run one diagnostic command in the JVM `pid` through its attach socket.
fn jcmd(pid: u32, command: &str) -> Result<String, String> {
    let ns = ns_pid(pid).ok_or("gone")?;
    let fd = match socket(pid, ns)? {
        Some(fd) => fd,
        None => start_listener(pid, ns)?,
    };
    // Connected through the descriptor: the socket checked is the one used.
    let at = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let shown = format!("/proc/{pid}/root/tmp/.java_pid{ns}");
    let mut s = UnixStream::connect(&at).map_err(|e| format!("{shown}: {e}"))?;
    s.set_write_timeout(Some(REPLY_WAIT)).ok();
    let req = format!("1\0jcmd\0{command}\0\0\0");
    s.write_all(req.as_bytes()).map_err(|e| format!("attach socket: {e}"))?;
    let out = safe_open::read_bounded(&mut s, REPLY_MAX, REPLY_WAIT).map_err(|e| format!("attach socket {shown}: {e}"))?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Bounds on the JVM's answer to one command (Compiler.perfmap answers a
/// line; a process that only plays a JVM may send forever).
const REPLY_MAX: usize = 1 << 20;
const REPLY_WAIT: Duration = Duration::from_secs(10);

/// Make the JVM open its attach socket: the trigger file, then SIGQUIT.
fn start_listener(pid: u32, ns: u32) -> Result<OwnedFd, String> {
    if !catches_sigquit(pid) {
        return Err("its signal handlers were not set yet".into());
    }
    // The trigger in the JVM's /tmp, created exclusively and with no link
    // on the way (openat2 in its root): never through a file or link
    // someone planted there, and a lock between the capture tools that
    // run side by side (wallclock's offcputime and oncputime). A second
    // SIGQUIT once the listener runs would make the JVM print a thread
    // dump on its stdout.
    let inside = format!("/tmp/.attach_pid{ns}");
    let shown = format!("/proc/{pid}/root{inside}");
    let sent = match safe_open::create_in_root(pid, &inside, 0o600) {
        // SAFETY: a signal to a process that catches it (checked above).
        Ok(_) => (unsafe { libc::kill(pid as i32, libc::SIGQUIT) }) == 0,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => true,
        Err(e) => return Err(format!("{shown}: {e}")),
    };
    let t0 = Instant::now();
    let mut found = socket(pid, ns);
    while sent && matches!(found, Ok(None)) && t0.elapsed() < ATTACH_WAIT {
        std::thread::sleep(Duration::from_millis(20));
        found = socket(pid, ns);
    }
    // Ours, or left by a tool that was killed: the JVM needs it no more.
    // (Removed through its folder, opened with no link on the way.)
    if let Ok(tmp) = safe_open::dir_in_root(pid, "/tmp") {
        let name = std::ffi::CString::new(format!(".attach_pid{ns}")).unwrap_or_default();
        // SAFETY: a valid descriptor and name.
        unsafe { libc::unlinkat(tmp.as_raw_fd(), name.as_ptr(), 0) };
    }
    match found? {
        Some(fd) => Ok(fd),
        None => Err("it did not open its attach socket (started with -XX:+DisableAttachMechanism?)".into()),
    }
}
