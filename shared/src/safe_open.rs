//! Opening files a profiled process controls, safely.
//!
//! The tools run as root and read files their targets write or choose:
//! `/tmp/perf-PID.map`, the binaries and debug files of their mappings
//! through `/proc/PID/root`, the JVM's attach files, the GPU attach
//! folder. A target can make any of them a symbolic link (to `/dev/zero`,
//! to a root-only file), a fifo (an open that never returns), or a file of
//! gigabytes. Every such file is opened here:
//!
//! - no link is followed: `O_NOFOLLOW` on the last component, and under
//!   `/proc/PID/root` `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS)`, so
//!   that no component of the path is a link and `..` stays in the
//!   target's root;
//! - `O_NONBLOCK`, so that a fifo cannot hold the open, then `fstat`: it
//!   must be a regular file;
//! - its owner must be the target's user, or it must be readable by
//!   everyone: a file only root may read is never read on a target's
//!   behalf (an owner check rather than opening with the target's
//!   credentials: `setfsuid` is per thread and the tools are not built
//!   around one thread that does all opening; the check gives the same
//!   answer for a file, since the target's user could read either);
//! - it is read within [`Bounds`]: past one, the file is skipped with a
//!   [`Skip`] saying which file and why, and the caller goes on without it.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Why a file was not read: one line naming the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    pub path: String,
    pub why: String,
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: skipped: {}", self.path, self.why)
    }
}

/// Whose file it may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// Owned by this user (the target's), or readable by everyone.
    User(u32),
    /// The target's user is not known (it exited): readable by everyone.
    Unknown,
    /// Anyone's: a file the process mapped (its binaries and libraries),
    /// which it could read or run already; still no link, a regular file.
    Any,
}

/// How much of a file is read.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Largest file, in bytes.
    pub max_bytes: u64,
    /// Longest line, in bytes (line-wise reads only).
    pub max_line: usize,
    /// Most lines (line-wise reads only).
    pub max_lines: usize,
}

/// A perf map: node and a JVM write some MB in an hour; a million
/// symbols is a big one.
pub const PERF_MAP: Bounds = Bounds { max_bytes: 256 << 20, max_line: 64 << 10, max_lines: 4 << 20 };

fn skip(path: &Path, why: impl Into<String>) -> Skip {
    Skip { path: path.display().to_string(), why: why.into() }
}

fn why_not_opened(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ELOOP) => "a symbolic link (not followed)".into(),
        Some(libc::EXDEV) => "a path that leaves the process's root (not followed)".into(),
        _ => e.to_string(),
    }
}

/// Open `path` (none of whose last component may be a link) for reading,
/// checked as the module says; `Ok(None)` when there is no such file.
pub fn open(path: &Path, owner: Owner) -> Result<Option<File>, Skip> {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path);
    match opened {
        Ok(f) => check(path, f, owner).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(skip(path, why_not_opened(&e))),
    }
}

/// Open `path` as process `pid` sees it (`/proc/PID/root` + `path`), no
/// component a link, `..` kept inside that root; `Ok(None)` when there is
/// no such file or no such process.
pub fn open_in_root(pid: u32, path: &str, owner: Owner) -> Result<Option<File>, Skip> {
    let shown = format!("/proc/{pid}/root{path}");
    let shown = Path::new(&shown);
    match at_root(pid, path, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY, 0) {
        Ok(Some(fd)) => check(shown, File::from(fd), owner).map(Some),
        Ok(None) => Ok(None),
        // A kernel before 5.6: the last component unfollowed at least.
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => open(shown, owner),
        Err(e) => Err(skip(shown, why_not_opened(&e))),
    }
}

/// A folder as process `pid` sees it, no component a link (a descriptor
/// to use as `/proc/self/fd/N`).
pub fn dir_in_root(pid: u32, path: &str) -> std::io::Result<OwnedFd> {
    at_root(pid, path, libc::O_PATH | libc::O_DIRECTORY, 0)?.ok_or_else(|| std::io::ErrorKind::NotFound.into())
}

/// A unix socket of process `pid`'s user as the process sees it, no
/// component a link: an `O_PATH` descriptor to connect to as
/// `/proc/self/fd/N`, so that the socket checked is the one connected to.
pub fn socket_in_root(pid: u32, path: &str, owner: Owner) -> Result<Option<OwnedFd>, Skip> {
    let shown = format!("/proc/{pid}/root{path}");
    let fd = match at_root(pid, path, libc::O_PATH, 0) {
        Ok(Some(fd)) => fd,
        Ok(None) => return Ok(None),
        Err(e) => return Err(skip(Path::new(&shown), why_not_opened(&e))),
    };
    // SAFETY: `stat` is plain integers, for which all-zero bytes are a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    use std::os::fd::AsRawFd;
    // SAFETY: `st` is a valid stat buffer; an empty path with AT_EMPTY_PATH
    // stats the descriptor itself.
    if unsafe { libc::fstatat(fd.as_raw_fd(), c"".as_ptr(), &mut st, libc::AT_EMPTY_PATH) } != 0 {
        return Err(skip(Path::new(&shown), std::io::Error::last_os_error().to_string()));
    }
    // O_PATH | O_NOFOLLOW opens a last-component link as itself.
    if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
        return Err(skip(Path::new(&shown), "a symbolic link (not followed)"));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(skip(Path::new(&shown), "not a socket"));
    }
    match owner {
        Owner::User(uid) if st.st_uid == uid => Ok(Some(fd)),
        _ => Err(skip(Path::new(&shown), format!("owned by uid {}, not by the process's user", st.st_uid))),
    }
}

/// Create `path` (it must not exist) for writing, as process `pid` sees it,
/// no component a link.
pub fn create_in_root(pid: u32, path: &str, mode: u32) -> std::io::Result<File> {
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
    Ok(File::from(at_root(pid, path, flags, mode)?.ok_or(std::io::ErrorKind::NotFound)?))
}

/// `struct open_how` of openat2(2) (libc's cannot be built: non-exhaustive).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2` under `/proc/PID/root` with `RESOLVE_IN_ROOT |
/// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`; `Ok(None)`: no such
/// file (or process).
fn at_root(pid: u32, path: &str, flags: i32, mode: u32) -> std::io::Result<Option<OwnedFd>> {
    let Ok(root) = File::open(format!("/proc/{pid}/root")) else { return Ok(None) };
    let c = std::ffi::CString::new(path.as_bytes()).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let how = OpenHow {
        flags: (flags | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64,
        mode: mode as u64,
        resolve: libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    };
    use std::os::fd::AsRawFd;
    // SAFETY: `how` and `c` outlive the call; the size is `how`'s.
    let fd = unsafe {
        libc::syscall(libc::SYS_openat2, root.as_raw_fd(), c.as_ptr(), &how as *const OpenHow, std::mem::size_of::<OpenHow>())
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ESRCH) if flags & libc::O_CREAT == 0 => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: a descriptor the kernel just returned, owned by nothing else.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
}

fn check(path: &Path, f: File, owner: Owner) -> Result<File, Skip> {
    let m = f.metadata().map_err(|e| skip(path, e.to_string()))?;
    if !m.file_type().is_file() {
        return Err(skip(path, format!("not a regular file (a {})", kind(&m))));
    }
    let everyone = m.mode() & 0o004 != 0;
    match owner {
        Owner::User(uid) if m.uid() == uid || everyone => {}
        Owner::Unknown if everyone => {}
        Owner::Any => {}
        Owner::User(uid) => {
            return Err(skip(path, format!("owned by uid {} and not readable by everyone, not by the process's user (uid {uid})", m.uid())))
        }
        Owner::Unknown => return Err(skip(path, format!("owned by uid {} and not readable by everyone", m.uid()))),
    }
    Ok(f)
}

fn kind(m: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_fifo() {
        "fifo"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_dir() {
        "directory"
    } else {
        "special file"
    }
}

/// The size of an opened file, checked against `b`.
pub fn checked_len(path: &Path, f: &File, b: Bounds) -> Result<u64, Skip> {
    let len = f.metadata().map_err(|e| skip(path, e.to_string()))?.len();
    if len > b.max_bytes {
        return Err(skip(path, format!("{len} bytes, more than the {} read at most", b.max_bytes)));
    }
    Ok(len)
}

/// Each whole line of `f` from its current offset, read within `b` (the
/// size checked first, the bytes read never more than the bound even if
/// the file grows meanwhile); a line being written (no newline yet) is
/// left out. Returns the bytes consumed.
pub fn for_each_line(path: &Path, f: &File, b: Bounds, mut each: impl FnMut(&[u8])) -> Result<u64, Skip> {
    let len = checked_len(path, f, b)?;
    let mut r = BufReader::with_capacity(64 << 10, f.take(len.min(b.max_bytes)));
    let (mut line, mut lines, mut used) = (Vec::new(), 0usize, 0u64);
    loop {
        line.clear();
        let n = (&mut r).take(b.max_line as u64 + 1).read_until(b'\n', &mut line).map_err(|e| skip(path, e.to_string()))?;
        if n == 0 || line.last() != Some(&b'\n') {
            if line.len() > b.max_line {
                return Err(skip(path, format!("a line longer than {} bytes (line {})", b.max_line, lines + 1)));
            }
            return Ok(used);
        }
        lines += 1;
        if lines > b.max_lines {
            return Err(skip(path, format!("more than {} lines", b.max_lines)));
        }
        used += n as u64;
        each(&line[..n - 1]);
    }
}

/// The whole of a small file, read within `b.max_bytes`.
pub fn read_all(path: &Path, f: &File, b: Bounds) -> Result<Vec<u8>, Skip> {
    let len = checked_len(path, f, b)?;
    let mut out = Vec::with_capacity(len as usize);
    f.take(b.max_bytes + 1).read_to_end(&mut out).map_err(|e| skip(path, e.to_string()))?;
    if out.len() as u64 > b.max_bytes {
        return Err(skip(path, format!("grew past the {} bytes read at most", b.max_bytes)));
    }
    Ok(out)
}

/// What a peer (a target's socket) sends until it closes, at most `max`
/// bytes and for at most `within`: a peer that sends forever, or slowly,
/// is cut off with an error saying which bound it passed.
pub fn read_bounded(r: &mut std::os::unix::net::UnixStream, max: usize, within: std::time::Duration) -> std::io::Result<Vec<u8>> {
    let until = std::time::Instant::now() + within;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no end after {within:?}")));
        }
        r.set_read_timeout(Some(left))?;
        let n = match r.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(out);
        }
        if out.len() + n > max {
            return Err(std::io::Error::other(format!("more than {max} bytes")));
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// The real uid of process `pid` (`Owner::Unknown` when it is gone).
pub fn owner_of(pid: u32) -> Owner {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return Owner::Unknown };
    s.lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .map_or(Owner::Unknown, Owner::User)
}

/// When process `pid` started, in seconds since the epoch (its start in
/// clock ticks after boot, and when the machine booted by this clock).
pub fn start_time(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may hold spaces and parens.
    let rest = &stat[stat.rfind(')')? + 2..];
    let ticks: f64 = rest.split(' ').nth(19)?.parse().ok()?;
    // SAFETY: sysconf reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let now = |c| {
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `t` is a valid timespec.
        unsafe { libc::clock_gettime(c, &mut t) };
        t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
    };
    let booted = now(libc::CLOCK_REALTIME) - now(libc::CLOCK_BOOTTIME);
    Some(booted + ticks / hz)
}

/// Was the file `f` last written before process `pid` started (a file an
/// earlier process with that pid left)? One tick of the start time's
/// resolution is given to the process.
pub fn older_than_process(f: &File, pid: u32) -> Option<bool> {
    let m = f.metadata().ok()?;
    let mtime = m.mtime() as f64 + m.mtime_nsec() as f64 / 1e9;
    Some(mtime + 0.02 < start_time(pid)?)
}

#[cfg(test)]
#[path = "safe_open_tests.rs"]
mod tests;
