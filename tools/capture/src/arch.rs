//! What the user-space unwinder takes from the architecture it is built
//! for: framehop's unwinder, cache and registers, and the registers a
//! stack event starts from (ip, sp and the frame pointer; on arm64 the
//! link register too, a leaf's caller). x86-64 and arm64 only.

#[cfg(target_arch = "x86_64")]
pub use framehop::x86_64::{CacheX86_64 as Cache, UnwindRegsX86_64 as Regs, UnwinderX86_64 as ArchUnwinder};
#[cfg(target_arch = "aarch64")]
pub use framehop::aarch64::{CacheAarch64 as Cache, UnwindRegsAarch64 as Regs, UnwinderAarch64 as ArchUnwinder};

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("wallclock's unwinder is built for x86_64 and aarch64 only");

/// The registers at a leaf. x86-64's leaf finds its caller on the stack
/// (`lr` is unused); arm64's in `lr` when it has not saved it (the pc is
/// framehop's first frame address, not a register).
pub fn leaf_regs(ip: u64, sp: u64, fp: u64, lr: u64) -> Regs {
    #[cfg(target_arch = "x86_64")]
    {
        let _ = lr;
        Regs::new(ip, sp, fp)
    }
    #[cfg(target_arch = "aarch64")]
    {
        let _ = ip;
        // Return addresses signed by pointer authentication (paciasp)
        // carry their hash above the 48 bits of a user address.
        Regs::new_with_ptr_auth_mask(framehop::aarch64::PtrAuthMask(u64::MAX >> 16), lr, sp, fp)
    }
}

/// After a frame-pointer step out of the frame whose record was at `fp`:
/// on arm64, V8's JSEntry (the builtin C++ calls JavaScript through)
/// pushes its 18 callee-saved registers (x19-x28, d8-d15) *before* its
/// frame record, so its caller's sp is 144 bytes above where a plain
/// frame-pointer step leaves it (`EntryFrameConstants::
/// kDirectCallerSPOffset`, frame-constants-arm64.h), and the C++
/// caller's CFI, read from the wrong sp, walked into data. It is told by
/// the two words V8 pushes below the record: the frame type (ENTRY or
/// CONSTRUCT_ENTRY, marked as 2 or 4), then 0. x86-64's JSEntry keeps
/// its record at the top, as a plain frame does: nothing to do there.
pub fn past_v8_entry_frame(fp: u64, regs: &mut Regs, read: impl Fn(u64) -> Result<u64, ()>) {
    #[cfg(target_arch = "aarch64")]
    if regs.sp() == fp.wrapping_add(16) && matches!(read(fp.wrapping_sub(8)), Ok(2 | 4)) && read(fp.wrapping_sub(16)) == Ok(0) {
        regs.set_sp(fp.wrapping_add(16 + 18 * 8));
    }
    #[cfg(target_arch = "x86_64")]
    let _ = (fp, regs, read);
}

/// The frame pointer (rbp, x29) by one name.
pub trait FramePointer {
    fn frame_pointer(&self) -> u64;
    fn set_frame_pointer(&mut self, v: u64);
}

impl FramePointer for Regs {
    #[cfg(target_arch = "x86_64")]
    fn frame_pointer(&self) -> u64 {
        self.bp()
    }
    #[cfg(target_arch = "x86_64")]
    fn set_frame_pointer(&mut self, v: u64) {
        self.set_bp(v)
    }
    #[cfg(target_arch = "aarch64")]
    fn frame_pointer(&self) -> u64 {
        self.fp()
    }
    #[cfg(target_arch = "aarch64")]
    fn set_frame_pointer(&mut self, v: u64) {
        self.set_fp(v)
    }
}

/// The system calls whose arguments name what a thread waits on
/// (capture's objects.rs), by this architecture's numbers: `FD` (the calls
/// whose first argument is an fd: read write ioctl pread64 pwrite64 readv
/// writev sendfile connect accept sendto recvfrom sendmsg recvmsg fcntl
/// flock fsync fdatasync ftruncate getdents64 splice tee sync_file_range
/// fallocate accept4 preadv pwritev recvmmsg sendmmsg copy_file_range
/// preadv2 pwritev2), `POLL`, `PPOLL`, `SELECT`, `PSELECT6`, `EPOLL_WAIT`,
/// `EPOLL_PWAIT`, `EPOLL_PWAIT2`, `FUTEX_WAITV`, `FUTEX`, `WAIT4`,
/// `WAITID`. Generated (build.rs) from the numbers the BPF side uses,
/// bpf/x86/regs.bpf.h or bpf/arm64/regs.bpf.h. arm64 has no poll, select
/// or epoll_wait (libc calls ppoll, pselect6 and epoll_pwait): numbers no
/// call has.
pub mod nr {
    include!(concat!(env!("OUT_DIR"), "/nr.rs"));
}
