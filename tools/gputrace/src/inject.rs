//! Loading a library into a running process (x86-64 Linux; elsewhere an
//! error says so), the way a debugger calls a function in its inferior:
//! ptrace-stop the main thread, save its registers, point it at `dlopen`
//! (found in the target's own libc through the file's symbols and the
//! maps) with the path on its stack and a return address of 0, let it run
//! until that return faults, read the result, put the registers back,
//! detach. The thread then goes on where it was (an interrupted sleep
//! restarts).

use std::ffi::CString;

use anyhow::{bail, Context, Result};
use std::path::Path;

use wallclock_stream::{procmaps, safe_open};

/// The most of a library read for its symbols (libcuda is some 50 MB).
const LIBRARY: safe_open::Bounds = safe_open::Bounds { max_bytes: 1 << 30, max_line: 0, max_lines: 0 };

/// The address of `symbol` in `pid`, from the first mapped file whose
/// name matches `file` (`libc.so.6`, `libcupti_inject.so`).
pub fn symbol_in(pid: u32, file: &dyn Fn(&str) -> bool, symbol: &str) -> Result<u64> {
    use object::{Object, ObjectSegment, ObjectSymbol};
    let maps = procmaps::read(pid).with_context(|| format!("cannot read /proc/{pid}/maps"))?;
    let m = maps
        .iter()
        .find(|m| file(m.entry.path.rsplit('/').next().unwrap_or("")))
        .with_context(|| format!("process {pid} has no such library mapped (looking for {symbol})"))?;
    let path = &m.entry.path;
    // Through the target's root: a process in a container sees its own files.
    // No link the process planted is followed, within a bound.
    let shown = format!("/proc/{pid}/root{path}");
    let data = match safe_open::open_in_root(pid, path, safe_open::owner_of(pid)) {
        Ok(Some(f)) => safe_open::read_all(Path::new(&shown), &f, LIBRARY),
        Ok(None) => Err(safe_open::Skip { path: shown, why: "no such file".into() }),
        Err(e) => Err(e),
    }
    .map_err(|e| anyhow::anyhow!("cannot read {path}: {e}"))?;
    let elf = object::File::parse(&*data).with_context(|| format!("{path} is not an ELF file"))?;
    let addr = elf
        .dynamic_symbols()
        .chain(elf.symbols())
        .find(|s| s.name() == Ok(symbol) && s.address() != 0)
        .map(|s| s.address())
        .with_context(|| format!("{path} has no symbol {symbol}"))?;
    let segs: Vec<(u64, u64, u64)> =
        elf.segments().map(|s| (s.file_range().0, s.address(), s.file_range().1)).collect();
    let bias = wallclock_capture::elf::load_bias(&segs, m.entry.start, m.entry.offset)
        .with_context(|| format!("cannot place {path} in process {pid}"))?;
    Ok(addr.wrapping_add(bias))
}

#[cfg(target_arch = "x86_64")]
fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// A ptrace-stopped thread; detached (registers restored) on drop.
/// x86-64's registers: the call below is x86-64's (arm64 would set x0,
/// x1, the link register and pc, and cancel a syscall's restart apart).
#[cfg(target_arch = "x86_64")]
pub struct Stopped {
    tid: i32,
    saved: libc::user_regs_struct,
}

#[cfg(target_arch = "x86_64")]
impl Stopped {
    /// Attaches to `tid` and waits for it to stop. The errors say why
    /// attaching was refused.
    pub fn attach(tid: u32) -> Result<Stopped> {
        let t = tid as i32;
        // SAFETY: ptrace/waitpid on a pid with valid arguments.
        unsafe {
            if libc::ptrace(libc::PTRACE_ATTACH, t, 0, 0) != 0 {
                let e = errno();
                if e.raw_os_error() == Some(libc::EPERM) {
                    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").unwrap_or_default();
                    let scope = scope.trim();
                    let hint = match scope {
                        "1" => " (kernel.yama.ptrace_scope is 1: only a parent may trace; run as root or set it to 0)",
                        "2" => " (kernel.yama.ptrace_scope is 2: only root may trace; run as root)",
                        "3" => " (kernel.yama.ptrace_scope is 3: ptrace is disabled until reboot)",
                        _ => " (another user's process: run as root or as its owner)",
                    };
                    bail!("attaching to process {tid} was refused: {e}{hint}");
                }
                bail!("cannot attach to process {tid}: {e}");
            }
            let mut status = 0;
            if libc::waitpid(t, &mut status, libc::__WALL) != t {
                bail!("waiting for process {tid} to stop: {}", errno());
            }
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                bail!("process {tid} exited while being attached");
            }
            let mut saved: libc::user_regs_struct = std::mem::zeroed();
            if libc::ptrace(libc::PTRACE_GETREGS, t, 0, &mut saved) != 0 {
                let e = errno();
                libc::ptrace(libc::PTRACE_DETACH, t, 0, 0);
                bail!("cannot read the registers of process {tid}: {e}");
            }
            Ok(Stopped { tid: t, saved })
        }
    }

    fn poke(&self, addr: u64, bytes: &[u8]) -> Result<()> {
        for (i, chunk) in bytes.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            let a = addr + 8 * i as u64;
            if chunk.len() < 8 {
                // Keep the bytes beyond the chunk as they were.
                // SAFETY: PEEKDATA of a word on the stopped thread.
                let old = unsafe { libc::ptrace(libc::PTRACE_PEEKDATA, self.tid, a, 0) } as u64;
                w[chunk.len()..].copy_from_slice(&old.to_ne_bytes()[chunk.len()..]);
            }
            // SAFETY: POKEDATA of a word on the stopped thread's stack.
            if unsafe { libc::ptrace(libc::PTRACE_POKEDATA, self.tid, a, u64::from_ne_bytes(w)) } != 0 {
                bail!("cannot write into process {}: {}", self.tid, errno());
            }
        }
        Ok(())
    }

    /// Calls `func(a0, a1)` in the stopped thread, on its stack below the
    /// red zone, with `data` copied there (its address replaces any
    /// argument equal to `DATA`); returns the function's `rax`.
    pub fn call(&self, func: u64, args: [u64; 2], data: &[u8]) -> Result<u64> {
        let mut r = self.saved;
        let top = (self.saved.rsp - 1024) & !0xf;
        let data_at = top - ((data.len() as u64 + 15) & !0xf);
        self.poke(data_at, data)?;
        // At a function's entry rsp + 8 is 16-byte aligned; the return
        // address 0 makes its `ret` fault, which stops the thread here.
        let rsp = data_at - 16 - 8;
        self.poke(rsp, &0u64.to_ne_bytes())?;
        let arg = |a: u64| if a == DATA { data_at } else { a };
        r.rip = func;
        r.rdi = arg(args[0]);
        r.rsi = arg(args[1]);
        r.rax = 0;
        r.rsp = rsp;
        // Not in a system call any more: no restart of the interrupted one.
        r.orig_rax = u64::MAX;
        let t = self.tid;
        // SAFETY: register and run control of the thread we stopped.
        unsafe {
            if libc::ptrace(libc::PTRACE_SETREGS, t, 0, &r) != 0 {
                bail!("cannot set the registers of process {t}: {}", errno());
            }
            let mut sig = 0;
            loop {
                if libc::ptrace(libc::PTRACE_CONT, t, 0, sig) != 0 {
                    bail!("cannot resume process {t}: {}", errno());
                }
                let mut status = 0;
                if libc::waitpid(t, &mut status, libc::__WALL) != t {
                    bail!("waiting for process {t}: {}", errno());
                }
                if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                    bail!("process {t} exited during the call into it");
                }
                let s = libc::WSTOPSIG(status);
                let mut now: libc::user_regs_struct = std::mem::zeroed();
                libc::ptrace(libc::PTRACE_GETREGS, t, 0, &mut now);
                if s == libc::SIGSEGV && now.rip == 0 {
                    return Ok(now.rax);
                }
                if s == libc::SIGSEGV || s == libc::SIGBUS || s == libc::SIGILL {
                    bail!("the call into process {t} faulted (signal {s} at {:#x})", now.rip);
                }
                // A signal for the program meanwhile: delivered, not eaten.
                sig = if s == libc::SIGSTOP { 0 } else { s };
            }
        }
    }
}

/// Marks the argument that is the address of the copied data.
pub const DATA: u64 = u64::MAX - 1;

#[cfg(target_arch = "x86_64")]
impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: restoring the registers saved at attach, then detaching.
        unsafe {
            libc::ptrace(libc::PTRACE_SETREGS, self.tid, 0, &self.saved);
            libc::ptrace(libc::PTRACE_DETACH, self.tid, 0, 0);
        }
    }
}

/// `dlopen(path, RTLD_NOW)` in `pid`, then `init(arg)` of the library,
/// `arg` (a C string with its NUL) copied into the process; the value
/// `init` returned.
pub fn load_and_call(pid: u32, lib: &std::path::Path, init: &str, arg: &[u8]) -> Result<i32> {
    let is_libc = |f: &str| f.starts_with("libc.so") || (f.starts_with("libc-") && f.ends_with(".so"));
    let dlopen = symbol_in(pid, &is_libc, "dlopen")
        .or_else(|_| symbol_in(pid, &is_libc, "__libc_dlopen_mode"))
        .with_context(|| format!("cannot find dlopen in the libc of process {pid}"))?;
    let path = CString::new(lib.as_os_str().as_encoded_bytes()).context("library path")?;
    call_in(pid, dlopen, &path, lib, init, arg)
}

#[cfg(not(target_arch = "x86_64"))]
fn call_in(pid: u32, _dlopen: u64, _path: &CString, _lib: &std::path::Path, _init: &str, _arg: &[u8]) -> Result<i32> {
    bail!("loading the injection library into running process {pid} is done on x86-64 only: launch the program under gputrace instead")
}

/// The calls of `load_and_call` in the stopped process.
#[cfg(target_arch = "x86_64")]
fn call_in(pid: u32, dlopen: u64, path: &CString, lib: &std::path::Path, init: &str, arg: &[u8]) -> Result<i32> {
    let stopped = Stopped::attach(pid)?;
    let handle = stopped.call(dlopen, [DATA, libc::RTLD_NOW as u64], path.as_bytes_with_nul())?;
    if handle == 0 {
        bail!("dlopen of {} failed in process {pid} (is it readable by the process's user?)", lib.display());
    }
    let name = lib.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let f = symbol_in(pid, &|f: &str| f == name, init)?;
    let rc = stopped.call(f, [DATA, 0], arg)?;
    drop(stopped);
    Ok(rc as u32 as i32)
}
