//! What each block waited on, named in the target's own view.
//!
//! The BPF side keys each block by its object (bpf/fingerprint.bpf.h,
//! `block_obj`): a file descriptor with its file's inode number, a futex
//! word's address, the child a wait is for, or a wait on many fds. Here
//! they become the `object` of the stack records (wallclock-stream(5)):
//!
//! - an fd: `/proc/PID/fd/N` if it still holds that inode, else any fd of
//!   the process that does, else what a scan during the capture saw
//!   ([`Namer::scan`], at most once a second per process), else `fd N
//!   (closed)`. A file is
//!   `file PATH` (the path less the target's root: its mount namespace's
//!   view), a socket `tcp PEER:PORT` (`tcp listen ADDR:PORT` listening),
//!   `udp ...`, `unix PATH`, from the target's own `/proc/PID/net` (its
//!   network namespace), a pipe `pipe`, an anonymous inode its kind
//!   (`eventfd`, `epoll`, `timerfd`...). The inode tells an fd used again
//!   for another file apart: two objects.
//! - a futex: `lock SYMBOL` (`+0xN` inside it) when the word lies in a
//!   module's data (its ELF symbols), else `lock 0xADDRESS`, which the
//!   readers name by its commonest call site once the frames have names
//!   (`wallclock_stream::locks`: `lock in worker_loop`).
//! - a child: `child COMM PID` (`child any` for wait(-1)).
//! - many fds: `fds poll N`, `fds select`, `fds epoll_wait`; an
//!   `epoll_wait` whose set watches one socket (and anything else that is
//!   no socket: a server's latch, a signalfd, a pipe) is a wait for that
//!   socket's peer, `tcp 127.0.0.1:43210 (epoll_wait)` (PostgreSQL's
//!   backend waits for its client so), from /proc/PID/fdinfo/EPFD.

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::arch::nr as sysno;
use crate::event;

/// A block's object as BPF keyed it (`wc_okey.obj`, `oref`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Obj {
    pub oref: u32,
    pub obj: u64,
}

pub const KIND_FD: u32 = event::OBJ_FD;
pub const KIND_FUTEX: u32 = event::OBJ_FUTEX;
pub const KIND_CHILD: u32 = event::OBJ_CHILD;
pub const KIND_MANY: u32 = event::OBJ_MANY;

impl Obj {
    pub fn kind(self) -> u32 {
        self.oref >> 24
    }
    fn n(self) -> u32 {
        self.oref & 0xff_ffff
    }
    pub fn is_none(self) -> bool {
        self.kind() == 0
    }
}

/// A module's data symbols: (start, end, name), by start.
type Syms = Arc<Vec<(u64, u64, String)>>;

#[derive(Default)]
struct Inner {
    /// (pid, inode) -> name, from the scans of /proc/PID/fd.
    by_ino: HashMap<(u32, u64), String>,
    /// pid -> (socket inode -> name) and when it was read: again at
    /// each scan, or for a socket not in it (see [`Namer::sockets`]).
    socks: HashMap<u32, (Instant, HashMap<u64, String>)>,
    /// pid -> when it was last scanned.
    scanned: HashMap<u32, Instant>,
    /// child pid -> command, from the scans.
    children: HashMap<u32, String>,
    /// pid -> its file mappings at the last scan (a process gone at the
    /// stop names its locks from these).
    maps: HashMap<u32, Vec<wallclock_stream::procmaps::ProcMap>>,
    /// ELF path (as /proc/PID/root sees it) -> data symbols.
    syms: HashMap<String, Option<Syms>>,
    named: HashMap<(u32, Obj), Option<String>>,
    /// (pid, epoll fd) -> the one socket its set watches, from the scans.
    epolls: HashMap<(u32, u32), String>,
}

/// Names objects; remembers what it saw of each process while it lived.
#[derive(Default)]
pub struct Namer {
    inner: RefCell<Inner>,
}

fn proc_path(pid: u32, rest: &str) -> String {
    format!("/proc/{pid}/{rest}")
}

/// The target's root as this process sees it: `/` unless chrooted or in
/// a mount namespace of its own.
fn root_of(pid: u32) -> String {
    std::fs::read_link(proc_path(pid, "root")).map(|p| p.to_string_lossy().into_owned()).unwrap_or_else(|_| "/".into())
}

/// A path of the target's, less its root.
fn in_target_view(pid: u32, path: &str) -> String {
    let root = root_of(pid);
    if root != "/" {
        if let Some(rest) = path.strip_prefix(root.trim_end_matches('/')) {
            if rest.starts_with('/') {
                return rest.to_string();
            }
        }
    }
    path.to_string()
}

/// `0100007F:1538` (IPv4, the kernel's byte order) or 32 hex digits
/// (IPv6, four such words) to `127.0.0.1:5432` or `[::1]:5432`.
fn sock_addr(hex: &str) -> Option<String> {
    let (a, p) = hex.split_once(':')?;
    let port = u16::from_str_radix(p, 16).ok()?;
    if a.len() == 8 {
        let v = u32::from_str_radix(a, 16).ok()?;
        return Some(format!("{}:{port}", std::net::Ipv4Addr::from(v.swap_bytes())));
    }
    if a.len() != 32 {
        return None;
    }
    let mut b = [0u8; 16];
    for (i, w) in b.chunks_mut(4).enumerate() {
        let v = u32::from_str_radix(&a[i * 8..i * 8 + 8], 16).ok()?;
        w.copy_from_slice(&v.to_le_bytes());
    }
    let ip = std::net::Ipv6Addr::from(b);
    Some(match ip.to_ipv4_mapped() {
        Some(v4) => format!("{v4}:{port}"),
        None => format!("[{ip}]:{port}"),
    })
}

/// The sockets of the target's network namespace: inode -> name.
fn read_sockets(pid: u32) -> HashMap<u64, String> {
    let mut out = HashMap::new();
    for (file, proto) in [("net/tcp", "tcp"), ("net/tcp6", "tcp"), ("net/udp", "udp"), ("net/udp6", "udp")] {
        let Ok(text) = std::fs::read_to_string(proc_path(pid, file)) else { continue };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 {
                continue;
            }
            let (Some(local), Some(peer), Ok(ino)) = (sock_addr(f[1]), sock_addr(f[2]), f[9].parse::<u64>()) else { continue };
            let unconnected = f[2].trim_start_matches('0').starts_with(':');
            let name = match (proto, f[3]) {
                ("tcp", "0A") => format!("tcp listen {local}"),
                ("udp", _) if unconnected => format!("udp {local}"),
                _ => format!("{proto} {peer}"),
            };
            out.entry(ino).or_insert(name);
        }
    }
    if let Ok(text) = std::fs::read_to_string(proc_path(pid, "net/unix")) {
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let Some(Ok(ino)) = f.get(6).map(|s| s.parse::<u64>()) else { continue };
            let name = match f.get(7) {
                Some(p) => format!("unix {p}"),
                None => "unix".to_string(),
            };
            out.insert(ino, name);
        }
    }
    out
}

/// The data symbols of an ELF file: objects (and untyped ones) with
/// their extents.
fn data_symbols(path: &str) -> Option<Syms> {
    use object::{Object, ObjectSymbol, SymbolKind};
    let map = crate::elf::map_file(path)?;
    let file = object::File::parse(&*map).ok()?;
    let mut v: Vec<(u64, u64, String)> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| matches!(s.kind(), SymbolKind::Data | SymbolKind::Tls | SymbolKind::Unknown) && s.address() != 0)
        .filter_map(|s| Some((s.address(), s.address() + s.size().max(1), s.name().ok()?.to_string())))
        .filter(|(_, _, n)| !n.is_empty() && !n.starts_with('$'))
        .collect();
    v.sort();
    v.dedup_by(|a, b| a.0 == b.0);
    Some(Arc::new(v))
}

/// The PT_LOAD segments of an ELF file: (offset, vaddr, filesz, memsz).
fn segments(path: &str) -> Option<Vec<(u64, u64, u64, u64)>> {
    use object::{Object, ObjectSegment};
    let map = crate::elf::map_file(path)?;
    let file = object::File::parse(&*map).ok()?;
    Some(
        file.segments()
            .map(|s| {
                let (off, fsz) = s.file_range();
                (off, s.address(), fsz, s.size())
            })
            .collect(),
    )
}

/// A process is scanned at most this often: a scan reads its maps, every
/// fd, its network namespace's socket tables and each thread's children
/// (about 10 ms of CPU for a JVM serving HTTP here, most of it the
/// kernel walking its TCP hash table for /proc/PID/net/tcp). Done at each
/// turn of the capture loop (50 a second), that was a fifth of a CPU.
const SCAN_EVERY: Duration = Duration::from_secs(1);

/// A socket not in the table read this recently is looked for in a new
/// one (a connection made since), at most this often.
const SOCKS_AGAIN: Duration = Duration::from_millis(100);

impl Namer {
    /// What the target's processes hold now: each fd's name by inode, and
    /// their children's commands (a capture names what has closed or
    /// exited since from this). Each process at most once a second
    /// ([`SCAN_EVERY`]): called more often, it returns.
    pub fn scan(&self, pids: impl IntoIterator<Item = u32>) {
        let mut inner = self.inner.borrow_mut();
        let now = Instant::now();
        for pid in pids {
            if inner.scanned.get(&pid).is_some_and(|t| now.duration_since(*t) < SCAN_EVERY) {
                continue;
            }
            inner.scanned.insert(pid, now);
            inner.socks.remove(&pid);
            if let Some(m) = wallclock_stream::procmaps::read(pid) {
                inner.maps.insert(pid, m.into_iter().filter(|m| m.entry.path.starts_with('/')).collect());
            }
            let Ok(dir) = std::fs::read_dir(proc_path(pid, "fd")) else { continue };
            let fds: Vec<(u64, String)> = dir
                .flatten()
                .filter_map(|e| {
                    let ino = std::fs::metadata(e.path()).ok()?.ino();
                    let link = std::fs::read_link(e.path()).ok()?;
                    Some((ino, link.to_string_lossy().into_owned()))
                })
                .collect();
            for (ino, link) in fds {
                let name = self.describe(&mut inner, pid, &link, ino);
                inner.by_ino.insert((pid, ino), name);
            }
            for fd in epoll_fds(pid) {
                if let Some(n) = self.epoll_socket(&mut inner, pid, fd) {
                    inner.epolls.insert((pid, fd), n);
                }
            }
            for tid in crate::procfs::threads(pid) {
                let Ok(kids) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children")) else { continue };
                for kid in kids.split_whitespace().filter_map(|k| k.parse::<u32>().ok()) {
                    if let Some(c) = crate::procfs::comm(kid, kid) {
                        inner.children.insert(kid, c);
                    }
                }
            }
        }
    }

    /// A name from what `/proc/PID/fd/N` links to.
    fn describe(&self, inner: &mut Inner, pid: u32, link: &str, ino: u64) -> String {
        if link.starts_with("socket:[") {
            return Self::sockets(inner, pid, &[ino]).get(&ino).cloned().unwrap_or_else(|| "socket".to_string());
        }
        if link.starts_with("pipe:[") {
            return "pipe".to_string();
        }
        if let Some(a) = link.strip_prefix("anon_inode:") {
            let a = a.trim_start_matches('[').trim_end_matches(']');
            return match a {
                "eventpoll" => "epoll".to_string(),
                _ => a.to_string(),
            };
        }
        if link.starts_with('/') {
            return format!("file {}", in_target_view(pid, link));
        }
        link.to_string()
    }

    /// The one socket the epoll set of fd `epfd` watches (its peer, as
    /// an fd of it is named), when it watches exactly one.
    fn epoll_socket(&self, inner: &mut Inner, pid: u32, epfd: u32) -> Option<String> {
        let info = std::fs::read_to_string(proc_path(pid, &format!("fdinfo/{epfd}"))).ok()?;
        let inos: Vec<u64> = info
            .lines()
            .filter(|l| l.starts_with("tfd:"))
            .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("ino:")).and_then(|h| u64::from_str_radix(h, 16).ok()))
            .collect();
        let socks = Self::sockets(inner, pid, &[]);
        let mut named = inos.iter().filter_map(|i| socks.get(i));
        match (named.next(), named.next()) {
            (Some(one), None) => Some(one.clone()),
            _ => None,
        }
    }

    /// The sockets of `pid`'s network namespace, read again when one of
    /// `want` is not in the table and it is older than [`SOCKS_AGAIN`].
    fn sockets<'i>(inner: &'i mut Inner, pid: u32, want: &[u64]) -> &'i HashMap<u64, String> {
        let stale = match inner.socks.get(&pid) {
            None => true,
            Some((at, t)) => want.iter().any(|i| !t.contains_key(i)) && at.elapsed() >= SOCKS_AGAIN,
        };
        if stale {
            inner.socks.insert(pid, (Instant::now(), read_sockets(pid)));
        }
        &inner.socks[&pid].1
    }

    fn fd_name(&self, inner: &mut Inner, pid: u32, fd: u32, ino: u64) -> String {
        let p = proc_path(pid, &format!("fd/{fd}"));
        if let (Ok(m), Ok(link)) = (std::fs::metadata(&p), std::fs::read_link(&p)) {
            if m.ino() == ino {
                let name = self.describe(inner, pid, &link.to_string_lossy(), ino);
                inner.by_ino.insert((pid, ino), name.clone());
                return name;
            }
        }
        if let Some(n) = inner.by_ino.get(&(pid, ino)) {
            return n.clone();
        }
        format!("fd {fd} (closed)")
    }

    fn futex_name(&self, inner: &mut Inner, pid: u32, addr: u64) -> String {
        let unnamed = || format!("lock 0x{addr:x}");
        let Some(maps) = wallclock_stream::procmaps::read(pid).or_else(|| inner.maps.get(&pid).cloned()) else { return unnamed() };
        let root = format!("/proc/{pid}/root");
        let mut tried: Vec<&str> = Vec::new();
        for m in maps.iter().filter(|m| m.entry.path.starts_with('/') && !m.entry.path.ends_with(" (deleted)")) {
            let path = m.entry.path.as_str();
            if tried.contains(&path) {
                continue;
            }
            tried.push(path);
            // The module's extent: its mappings, and its .bss after them.
            let mut full = format!("{root}{path}");
            if std::fs::metadata(&full).is_err() {
                full = path.to_string(); // gone: its files as this process sees them
            }
            let Some(segs) = segments(&full) else { continue };
            let plain: Vec<(u64, u64, u64)> = segs.iter().map(|&(o, v, f, _)| (o, v, f)).collect();
            let Some(bias) = crate::elf::load_bias(&plain, m.entry.start, m.entry.offset) else { continue };
            let v = addr.wrapping_sub(bias);
            if !segs.iter().any(|&(_, va, _, msz)| v >= va && v < va + msz) {
                continue;
            }
            let syms = inner.syms.entry(full.clone()).or_insert_with(|| data_symbols(&full)).clone();
            let Some(syms) = syms else { return unnamed() };
            let i = syms.partition_point(|s| s.0 <= v);
            if i > 0 {
                let (start, end, name) = &syms[i - 1];
                if v < *end {
                    return if v == *start { format!("lock {name}") } else { format!("lock {name}+0x{:x}", v - start) };
                }
            }
            return unnamed();
        }
        unnamed()
    }

    fn child_name(&self, inner: &mut Inner, pid: u64, comm_of: &dyn Fn(u32) -> Option<String>) -> String {
        let p = pid as i64;
        if p <= 0 {
            return "child any".to_string();
        }
        let p = p as u32;
        // The capture's own name for it (a child it follows: its name
        // after its exec) before the scan's, which can have caught the
        // child between its fork and its exec, under its parent's name.
        let comm = crate::procfs::comm(p, p).or_else(|| comm_of(p)).or_else(|| inner.children.get(&p).cloned());
        match comm {
            Some(c) => format!("child {c} {p}"),
            None => format!("child {p}"),
        }
    }

    /// The name of `o`, a block's object in process `pid`; `comm_of`: the
    /// name the capture knows a thread by (a child it traced that has
    /// exited). None for no object.
    pub fn name(&self, pid: u32, o: Obj, comm_of: &dyn Fn(u32) -> Option<String>) -> Option<String> {
        if o.is_none() {
            return None;
        }
        let mut inner = self.inner.borrow_mut();
        if let Some(n) = inner.named.get(&(pid, o)) {
            return n.clone();
        }
        let n = match o.kind() {
            KIND_FD => Some(self.fd_name(&mut inner, pid, o.n(), o.obj)),
            KIND_FUTEX => Some(self.futex_name(&mut inner, pid, o.obj)),
            KIND_CHILD => Some(self.child_name(&mut inner, o.obj, comm_of)),
            KIND_MANY => Some(match o.obj {
                sysno::POLL | sysno::PPOLL => format!("fds poll {}", o.n()),
                sysno::SELECT | sysno::PSELECT6 => "fds select".to_string(),
                sysno::EPOLL_WAIT | sysno::EPOLL_PWAIT | sysno::EPOLL_PWAIT2 => match self.epoll_socket(&mut inner, pid, o.n()) {
                    Some(sock) => format!("{sock} (epoll_wait)"),
                    None => match inner.epolls.get(&(pid, o.n())) {
                        Some(sock) => format!("{sock} (epoll_wait)"),
                        None => "fds epoll_wait".to_string(),
                    },
                },
                sysno::FUTEX_WAITV => format!("fds futex_waitv {}", o.n()),
                _ => "fds".to_string(),
            }),
            _ => None,
        };
        inner.named.insert((pid, o), n.clone());
        n
    }

    /// The object of a thread blocked since before the start and still
    /// in the same block: its system call and arguments as /proc shows
    /// them now, as the BPF side would have read them.
    pub fn blocked_now(pid: u32, tid: u32) -> Obj {
        match read_syscall(pid, tid) {
            Some((nr, a0, a1)) => Self::syscall_obj(pid, nr, a0, a1),
            None => Obj::default(),
        }
    }

    /// The object of system call `nr` with first arguments `a0`, `a1`
    /// in process `pid` (an fd's inode read now from /proc/PID/fd), as
    /// the BPF side keys it (bpf/fingerprint.bpf.h, `block_obj`).
    pub fn syscall_obj(pid: u32, nr: u64, a0: u64, a1: u64) -> Obj {
        let oref = |k: u32, n: u64| k << 24 | (n as u32 & 0xff_ffff);
        let fd = |fd: u64| {
            let ino = std::fs::metadata(proc_path(pid, &format!("fd/{fd}"))).map(|m| m.ino()).unwrap_or(0);
            Obj { oref: oref(KIND_FD, fd), obj: ino }
        };
        match nr {
            n if sysno::FD.contains(&n) => fd(a0),
            sysno::FUTEX => Obj { oref: oref(KIND_FUTEX, 0), obj: a0 },
            sysno::WAIT4 => Obj { oref: oref(KIND_CHILD, 0), obj: a0 as i32 as i64 as u64 },
            sysno::WAITID => Obj { oref: oref(KIND_CHILD, 0), obj: if a0 == 1 { a1 as i32 as i64 as u64 } else { u64::MAX } },
            sysno::POLL | sysno::PPOLL if a1 != 1 => Obj { oref: oref(KIND_MANY, a1), obj: nr },
            sysno::SELECT | sysno::PSELECT6 | sysno::EPOLL_WAIT | sysno::EPOLL_PWAIT | sysno::EPOLL_PWAIT2 => Obj { oref: oref(KIND_MANY, a0), obj: nr },
            _ => Obj::default(),
        }
    }
}

/// The fds of `pid` that are epoll instances.
fn epoll_fds(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(proc_path(pid, "fd")) else { return Vec::new() };
    dir.flatten()
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == "anon_inode:[eventpoll]"))
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// `/proc/PID/task/TID/syscall` of a thread in a system call: its
/// number and first two arguments (None when running or not in one).
fn read_syscall(pid: u32, tid: u32) -> Option<(u64, u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    let f: Vec<&str> = s.split_whitespace().collect();
    let hex = |i: usize| f.get(i).and_then(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).ok());
    Some((f.first()?.parse::<u64>().ok()?, hex(1)?, hex(2)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses() {
        assert_eq!(sock_addr("0100007F:1538").as_deref(), Some("127.0.0.1:5432"));
        assert_eq!(sock_addr("00000000000000000000000001000000:1F90").as_deref(), Some("[::1]:8080"));
        assert_eq!(sock_addr("0000000000000000FFFF00000100007F:0050").as_deref(), Some("127.0.0.1:80"));
        assert_eq!(sock_addr("zz"), None);
    }

    /// This process's own objects: a file, a pipe, its own data symbol.
    #[test]
    fn names_own_fds() {
        let n = Namer::default();
        let me = std::process::id();
        let f = tempfile::NamedTempFile::new().unwrap();
        use std::os::fd::AsRawFd;
        let fd = f.as_file().as_raw_fd() as u64;
        let ino = f.as_file().metadata().unwrap().ino();
        let o = Obj { oref: KIND_FD << 24 | fd as u32, obj: ino };
        assert_eq!(n.name(me, o, &|_| None), Some(format!("file {}", f.path().display())));
        let other = Obj { oref: KIND_FD << 24 | fd as u32, obj: ino + 1 };
        assert_eq!(n.name(me, other, &|_| None), Some(format!("fd {fd} (closed)")));
        assert_eq!(n.name(me, Obj { oref: KIND_CHILD << 24, obj: u64::MAX }, &|_| None).as_deref(), Some("child any"));
        assert_eq!(n.name(me, Obj::default(), &|_| None), None);
    }

    /// An epoll set watching one TCP connection and a pipe: a wait for
    /// the connection's peer; with a second socket, a wait on many.
    #[test]
    fn names_an_epoll_wait_by_its_one_socket() {
        use std::os::fd::AsRawFd;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (p, _) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut pipe = [0i32; 2];
        // SAFETY: plain system calls on fds this test owns.
        let ep = unsafe {
            assert_eq!(libc::pipe(pipe.as_mut_ptr()), 0);
            let ep = libc::epoll_create1(0);
            for fd in [c.as_raw_fd(), pipe[0]] {
                let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: fd as u64 };
                assert_eq!(libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev), 0);
            }
            ep
        };
        let me = std::process::id();
        let o = Obj { oref: KIND_MANY << 24 | ep as u32, obj: sysno::EPOLL_PWAIT };
        let want = format!("tcp {} (epoll_wait)", l.local_addr().unwrap());
        assert_eq!(Namer::default().name(me, o, &|_| None), Some(want));
        // SAFETY: as above.
        unsafe {
            let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: 0 };
            assert_eq!(libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, p.as_raw_fd(), &mut ev), 0);
        }
        assert_eq!(Namer::default().name(me, o, &|_| None).as_deref(), Some("fds epoll_wait"));
        // SAFETY: fds this test opened.
        unsafe {
            libc::close(ep);
            libc::close(pipe[0]);
            libc::close(pipe[1]);
        }
    }
}
