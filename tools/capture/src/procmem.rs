//! Reads of another process's memory (process_vm_readv): the one reader
//! of every runtime's own structures read from outside (CPython's
//! frames and code objects, PHP's executor, HotSpot's tables; V8's and
//! Go's readers have wrappers of their own still, each the same call).

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
}
