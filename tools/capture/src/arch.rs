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
/// (offcputime's objects; bpf/*/regs.bpf.h has the same numbers), by this
/// architecture's numbers. arm64 has no poll, select or epoll_wait (libc
/// calls ppoll, pselect6 and epoll_pwait): numbers no call has.
pub mod nr {
    #[cfg(target_arch = "x86_64")]
    mod table {
        /// read write ioctl pread64 pwrite64 readv writev sendfile connect
        /// accept sendto recvfrom sendmsg recvmsg fcntl flock fsync
        /// fdatasync ftruncate getdents64 splice tee sync_file_range
        /// fallocate accept4 preadv pwritev recvmmsg sendmmsg
        /// copy_file_range preadv2 pwritev2: the first argument an fd.
        pub const FD: &[u64] = &[0, 1, 16, 17, 18, 19, 20, 40, 42, 43, 44, 45, 46, 47, 72, 73, 74, 75, 77, 217, 275, 276, 277, 285, 288, 295, 296, 299, 307, 326, 327, 328];
        pub const POLL: u64 = 7;
        pub const PPOLL: u64 = 271;
        pub const SELECT: u64 = 23;
        pub const PSELECT6: u64 = 270;
        pub const EPOLL_WAIT: u64 = 232;
        pub const EPOLL_PWAIT: u64 = 281;
        pub const EPOLL_PWAIT2: u64 = 441;
        pub const FUTEX_WAITV: u64 = 449;
        pub const FUTEX: u64 = 202;
        pub const WAIT4: u64 = 61;
        pub const WAITID: u64 = 247;
    }
    #[cfg(target_arch = "aarch64")]
    mod table {
        /// The same calls as x86-64's, by the generic numbers.
        pub const FD: &[u64] = &[63, 64, 29, 67, 68, 65, 66, 71, 203, 202, 206, 207, 211, 212, 25, 32, 82, 83, 46, 61, 76, 77, 84, 47, 242, 69, 70, 243, 269, 285, 286, 287];
        pub const POLL: u64 = -2i64 as u64;
        pub const PPOLL: u64 = 73;
        pub const SELECT: u64 = -3i64 as u64;
        pub const PSELECT6: u64 = 72;
        pub const EPOLL_WAIT: u64 = -4i64 as u64;
        pub const EPOLL_PWAIT: u64 = 22;
        pub const EPOLL_PWAIT2: u64 = 441;
        pub const FUTEX_WAITV: u64 = 449;
        pub const FUTEX: u64 = 98;
        pub const WAIT4: u64 = 260;
        pub const WAITID: u64 = 95;
    }
    pub use table::*;
}
