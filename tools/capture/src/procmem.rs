//! Reads of another process's memory (process_vm_readv): the one reader
//! of every runtime's own structures read from outside (CPython's
//! frames and code objects, PHP's executor, HotSpot's tables; V8's and
//! Go's readers have wrappers of their own still, each the same call),
//! and many ranges at once (`read_spans`: V8's reader, each turn).

/// The memory of process `pid`.
#[derive(Debug, Clone, Copy)]
pub struct Mem {
    pub pid: u32,
}

/// `buf.len()` bytes at `addr` of `pid`, whole or not at all.
pub fn read(pid: u32, addr: u64, buf: &mut [u8]) -> bool {
    if buf.is_empty() {
        return true;
    }
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: one local iovec over `buf`, which outlives the call; the
    // remote range is only read.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    n == buf.len() as isize
}

/// Most iovecs one process_vm_readv takes (UIO_MAXIOV).
const MAX_IOV: usize = 1024;

/// Each of `spans` (address, length) of `pid` read in as few calls as
/// the kernel allows: one process_vm_readv with an iovec per span, which
/// stops at the first span it cannot read whole; the spans after it go
/// in the next call. A span's bytes, or None where it was not read; and
/// whether the process is gone (ESRCH).
pub fn read_spans(pid: u32, spans: &[(u64, usize)]) -> (Vec<Option<Vec<u8>>>, bool) {
    let mut out: Vec<Option<Vec<u8>>> = vec![None; spans.len()];
    let mut i = 0;
    while i < spans.len() {
        let batch = &spans[i..spans.len().min(i + MAX_IOV)];
        let total: usize = batch.iter().map(|s| s.1).sum();
        let mut buf = vec![0u8; total];
        let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: total };
        let remote: Vec<libc::iovec> = batch.iter().map(|&(a, n)| libc::iovec { iov_base: a as *mut libc::c_void, iov_len: n }).collect();
        // SAFETY: one local iovec over `buf`, as long as the remote ones
        // together, which outlives the call; the remote ranges are only read.
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, remote.as_ptr(), remote.len() as libc::c_ulong, 0) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
            return (out, true);
        }
        let n = usize::try_from(n).unwrap_or(0);
        let (mut off, mut k) = (0, 0);
        for &(_, len) in batch {
            if off + len > n {
                break;
            }
            out[i + k] = Some(buf[off..off + len].to_vec());
            off += len;
            k += 1;
        }
        // The span at i + k was not read (or the batch was all read).
        i += k + 1;
    }
    (out, false)
}

impl Mem {
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), String> {
        if !read(self.pid, addr, buf) {
            return Err(format!("pid {}: cannot read {} bytes at {addr:#x}", self.pid, buf.len()));
        }
        Ok(())
    }

    pub fn u64(&self, addr: u64) -> Result<u64, String> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    pub fn u32(&self, addr: u64) -> Result<u32, String> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    pub fn u16(&self, addr: u64) -> Result<u16, String> {
        let mut b = [0u8; 2];
        self.read(addr, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    pub fn u8(&self, addr: u64) -> Result<u8, String> {
        let mut b = [0u8; 1];
        self.read(addr, &mut b)?;
        Ok(b[0])
    }

    /// A C string of at most 256 bytes (the tables' names, blob names),
    /// read in pieces that stay within its page.
    pub fn cstr(&self, addr: u64) -> Result<String, String> {
        let mut out = Vec::new();
        let mut a = addr;
        while out.len() < 256 {
            let n = (4096 - (a % 4096)).min(64) as usize;
            let mut b = vec![0u8; n];
            self.read(a, &mut b)?;
            if let Some(z) = b.iter().position(|&c| c == 0) {
                out.extend_from_slice(&b[..z]);
                return Ok(String::from_utf8_lossy(&out).into_owned());
            }
            out.extend_from_slice(&b);
            a += n as u64;
        }
        Err(format!("no string at {addr:#x}"))
    }

    /// Whether the process has exited: its memory is gone (ESRCH), not
    /// just this address unreadable (EFAULT, which address 0 always is).
    pub fn gone(&self) -> bool {
        let mut b = [0u8; 1];
        let local = libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: 1 };
        let remote = libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 1 };
        // SAFETY: one local iovec over `b`, which outlives the call.
        let n = unsafe { libc::process_vm_readv(self.pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_and_knows_a_gone_one() {
        let x: u64 = 0x1122_3344_5566_7788;
        let me = Mem { pid: std::process::id() };
        assert_eq!(me.u64(&x as *const u64 as u64), Ok(x));
        assert!(me.u64(0).is_err());
        assert!(!me.gone());
        // A child reaped: its pid names no process.
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        assert!(Mem { pid }.gone());
    }

    #[test]
    fn spans_read_at_once_past_one_that_is_not() {
        let a: [u64; 2] = [7, 8];
        let b: u64 = 9;
        let at = |p: *const u64| p as u64;
        let spans = [(at(&a[0]), 16), (0, 8), (at(&b), 8), (8, 8)];
        let (got, gone) = read_spans(std::process::id(), &spans);
        assert!(!gone);
        assert_eq!(got[0].as_deref(), Some(&[7u8, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0][..]));
        assert_eq!(got[1], None);
        assert_eq!(got[2].as_deref(), Some(&9u64.to_le_bytes()[..]));
        assert_eq!(got[3], None);
    }
}
