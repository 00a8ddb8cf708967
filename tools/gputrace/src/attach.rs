//! `gputrace -p PID [-d SECONDS]`: the GPU activity of a running CUDA
//! process over a window. The injection library is loaded into it
//! ([`crate::inject`]) and controlled through a folder gputrace makes
//! fresh at a random name in the process's /tmp (`tempfile`: mode 0700,
//! created exclusively, then given to the process's user) and names to
//! the library as the argument of `wallclock_gputrace_attach`, called
//! through ptrace: no name another user could guess and plant a link at
//! (see `cupti_inject`'s attach module). In it: `attach` before, `ready`
//! when CUPTI is on, `stop` at the end, `done` when the library has
//! flushed and let go. The folder is removed after the capture (kept
//! with WALLCLOCK_GPUTRACE_KEEP).

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use wallclock_stream::safe_open;

use crate::Cli;

/// What the window gave: the library's file, and whether the process
/// exited before the window's end.
pub struct Captured {
    pub text: String,
    pub exited: bool,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: i32) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn alive(pid: u32) -> bool {
    // A zombie has exited: its maps are empty.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| !r.starts_with('Z') && !r.starts_with('X')))
        .unwrap_or(false)
}

/// The checks that come before touching the process, each a one-line error.
fn check(pid: u32) -> Result<()> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).with_context(|| format!("no process {pid}"))?;
    let tracer = status.lines().find_map(|l| l.strip_prefix("TracerPid:")).map(str::trim).unwrap_or("0");
    if tracer != "0" {
        let comm = std::fs::read_to_string(format!("/proc/{tracer}/comm")).unwrap_or_default();
        bail!("process {pid} is already traced by {tracer} ({}): a process has one tracer at a time", comm.trim());
    }
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).with_context(|| format!("cannot read /proc/{pid}/maps"))?;
    let cuda = maps.lines().filter_map(|l| l.split_whitespace().nth(5)).any(|p| {
        let f = p.rsplit('/').next().unwrap_or("");
        f.starts_with("libcuda.so") || f.starts_with("libcudart")
    });
    if !cuda {
        bail!("process {pid} has no CUDA runtime loaded (no libcuda.so or libcudart in its maps): nothing to trace yet");
    }
    Ok(())
}

/// The library's file, read as a file the process controls (the folder
/// is its user's): no link, a regular file of its user's, within
/// [`GPU_FILE`]; else empty, said once.
fn read(file: &Path, pid: u32) -> String {
    let read = safe_open::open(file, safe_open::owner_of(pid)).and_then(|f| match f {
        Some(f) => safe_open::read_all(file, &f, GPU_FILE),
        None => Ok(Vec::new()),
    });
    match read {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(why) => {
            eprintln!("gputrace: warning: {why}");
            String::new()
        }
    }
}

/// The GPU records of one window: a million kernels is some 100 MB.
pub const GPU_FILE: safe_open::Bounds = safe_open::Bounds { max_bytes: 1 << 30, max_line: 1 << 20, max_lines: usize::MAX };

/// Attaches, waits for the window to start, lets it run `secs` (or until
/// Ctrl-C), stops it; the library's file.
pub fn capture(cli: &Cli, pid: u32, inject: &Path) -> Result<Captured> {
    check(pid)?;
    // A fresh folder at a random name in the process's /tmp, made with
    // O_EXCL semantics and mode 0700: nobody can plant a link there
    // beforehand, as they could at a name made of the pid alone.
    // Its /tmp opened with no link on the way (openat2 in its root): a link
    // there would be resolved in our root, not the process's.
    let tmp_fd = safe_open::dir_in_root(pid, "/tmp").with_context(|| format!("cannot open /proc/{pid}/root/tmp"))?;
    let tmp = PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&tmp_fd)));
    let made = tempfile::Builder::new()
        .prefix(&format!("wallclock-gputrace-{pid}-"))
        .tempdir_in(&tmp)
        .with_context(|| format!("cannot create a folder in {}", tmp.display()))?;
    let name = made.path().file_name().context("folder name")?.to_owned();
    // /proc/PID/root goes with the process: the folder is used through an
    // open descriptor of our own, which outlives a process that exits,
    // and removed at its real path (made by us, so no link on the way).
    let real = made.path().canonicalize().unwrap_or_else(|_| made.path().to_path_buf());
    let made = made.keep();
    let fd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(&made)
        .with_context(|| format!("cannot open {}", made.display()))?;
    let dir = PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd)));
    let seen = Path::new("/tmp").join(name);
    let result = window(cli, pid, inject, &dir, &seen);
    if std::env::var_os("WALLCLOCK_GPUTRACE_KEEP").is_none() {
        // std's remove_dir_all does not follow links inside.
        let _ = std::fs::remove_dir_all(&real);
    }
    drop(fd);
    result
}

/// Creates `name` in the folder, failing on anything already there (a
/// link the process's user put in its own folder included).
fn create(dir: &Path, name: &str, text: &str) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.join(name))
        .with_context(|| format!("cannot create {name} in the capture folder"))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

/// `seen`: the folder's name as the process sees it.
fn window(cli: &Cli, pid: u32, inject: &Path, dir: &Path, seen: &Path) -> Result<Captured> {
    let flush_ms = std::env::var("WALLCLOCK_GPU_FLUSH_MS").ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(1000);
    let mut ctl = format!("flush_ms {flush_ms}\n");
    let cupti = cli.cupti.clone().or_else(|| std::env::var_os("WALLCLOCK_CUPTI_PATH").map(PathBuf::from));
    if let Some(c) = cupti.filter(|c| !c.as_os_str().is_empty()) {
        ctl.push_str(&format!("cupti {}\n", c.canonicalize().unwrap_or(c).display()));
    }
    create(dir, "attach", &ctl)?;
    // The process writes here as its own user (mode 0700 from tempfile):
    // given to it only once our own file is in.
    let meta = std::fs::metadata(format!("/proc/{pid}")).with_context(|| format!("no process {pid}"))?;
    {
        use std::os::unix::fs::MetadataExt;
        std::os::unix::fs::chown(dir, Some(meta.uid()), Some(meta.gid()))
            .with_context(|| format!("cannot give the capture folder to process {pid}'s user"))?;
    }
    // Its name goes to the library as the argument of the call, through
    // ptrace: nothing another user can plant or read beforehand.
    let arg = std::ffi::CString::new(seen.as_os_str().as_encoded_bytes()).context("folder name")?;
    let rc = crate::inject::load_and_call(pid, inject, "wallclock_gputrace_attach", arg.as_bytes_with_nul())?;
    match rc {
        0 => {}
        2 => bail!("process {pid} is already traced by gputrace's library (started under gputrace, or another gputrace attached to it now)"),
        r => bail!("the injection library did not start in process {pid} (code {r})"),
    }
    let file = dir.join(format!("gpu-{pid}.txt"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dir.join("ready").exists() {
        if !alive(pid) {
            bail!("process {pid} exited before the capture started");
        }
        if Instant::now() > deadline {
            bail!("the injection library in process {pid} did not start within 20 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let end = cli.duration.map(|d| Instant::now() + Duration::from_secs_f64(d));
    let mut exited = false;
    let warned = read(&file, pid).lines().any(|l| l.starts_with("W "));
    if !warned {
        while end.is_none_or(|e| Instant::now() < e) && !INTERRUPTED.load(Ordering::SeqCst) {
            if !alive(pid) {
                exited = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // Fails only when the process (and its folder) is gone.
    let _ = create(dir, "stop", "");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !exited && !dir.join("done").exists() {
        if !alive(pid) {
            exited = true;
        } else if Instant::now() > deadline {
            bail!("the injection library in process {pid} did not end the capture within 10 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let text = read(&file, pid);
    Ok(Captured { text, exited })
}
