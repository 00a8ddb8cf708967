//! Reads of another process's memory (process_vm_readv).

pub struct Mem {
    pub pid: u32,
}

impl Mem {
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), String> {
        let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
        // SAFETY: one local iovec over `buf`, which outlives the call.
        let n = unsafe { libc::process_vm_readv(self.pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if n != buf.len() as isize {
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
}
