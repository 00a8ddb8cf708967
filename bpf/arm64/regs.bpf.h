/* arm64's side of what differs between the architectures the capture
 * programs are built for (bpf/x86/regs.bpf.h is the other; read that
 * first). */
#ifndef REGS_BPF_H
#define REGS_BPF_H

#define WC_RD(btf, p, f) ((btf) ? (p)->f : BPF_CORE_READ(p, f))

static __always_inline __u64 reg_ip(struct pt_regs *r, bool btf) { return WC_RD(btf, r, pc); }
static __always_inline __u64 reg_sp(struct pt_regs *r, bool btf) { return WC_RD(btf, r, sp); }
/* The frame pointer (x29). */
static __always_inline __u64 reg_fp(struct pt_regs *r, bool btf) { return WC_RD(btf, r, regs[29]); }
/* The link register (x30): a leaf's caller, which a leaf (a libc
 * syscall wrapper) need not store on the stack. */
static __always_inline __u64 reg_lr(struct pt_regs *r, bool btf) { return WC_RD(btf, r, regs[30]); }
/* The syscall number (NO_SYSCALL, -1, when the thread entered the kernel
 * otherwise); s32, sign-extended. */
static __always_inline __u64 reg_nr(struct pt_regs *r, bool btf) { return (__u64)(long)WC_RD(btf, r, syscallno); }
/* A syscall's first argument as it entered (x0 is its return value). */
static __always_inline __u64 reg_arg0(struct pt_regs *r, bool btf) { return WC_RD(btf, r, orig_x0); }
/* Its second (x1, unchanged by the syscall until it returns). */
static __always_inline __u64 reg_arg1(struct pt_regs *r, bool btf) { return WC_RD(btf, r, regs[1]); }

/* User addresses lie below this (48-bit address space). */
#define WC_USER_TOP 0x1000000000000ULL

/* By the generic syscall numbers arm64 uses. */
#define WC_FD_SYSCALLS \
	case 63: case 64: case 29: case 67: case 68: case 65: case 66: /* read write ioctl pread pwrite readv writev */ \
	case 71: case 203: case 202: case 206: case 207: case 211: case 212: /* sendfile connect accept sendto recvfrom sendmsg recvmsg */ \
	case 25: case 32: case 82: case 83: case 46: case 61: /* fcntl flock fsync fdatasync ftruncate getdents64 */ \
	case 76: case 77: case 84: case 47: case 242: /* splice tee sync_file_range fallocate accept4 */ \
	case 69: case 70: case 243: case 269: case 285: case 286: case 287: /* preadv pwritev recvmmsg sendmmsg copy_file_range preadv2 pwritev2 */

/* Is the instruction before a return address candidate (the last 4 of
 * the 8 bytes) a call: bl, blr, or a pointer-authenticating blraa/blrab
 * (and their z forms)? */
static __always_inline bool ends_with_call(const __u8 *c)
{
	__u32 i = c[4] | c[5] << 8 | c[6] << 16 | (__u32)c[7] << 24;
	return (i & 0xfc000000) == 0x94000000 || (i & 0xfffffc1f) == 0xd63f0000 || (i & 0xfefff800) == 0xd63f0800;
}

/* The thread pointer (TPIDR_EL0, saved in thread.uw.tp_value when the
 * thread left the CPU and set there by clone: a thread does not change
 * its own), and glibc's dtv at it (variant I: the TCB's first word). */
#define WC_TASK_TP(t) BPF_CORE_READ(t, thread.uw.tp_value)
#define WC_TP_DTV 0

/* The syscalls whose object a block records (fingerprint.bpf.h,
 * block_obj), by the generic numbers. arm64 has no poll, select or
 * epoll_wait (libc calls ppoll, pselect6, epoll_pwait): those are
 * numbers no syscall has (a thread not in a syscall reads -1).
 * tools/capture/build.rs reads these defines and WC_FD_SYSCALLS into
 * user space's table (wallclock_capture::arch::nr): one list. */
#define WC_NR_POLL -2
#define WC_NR_PPOLL 73
#define WC_NR_SELECT -3
#define WC_NR_PSELECT6 72
#define WC_NR_EPOLL_WAIT -4
#define WC_NR_EPOLL_PWAIT 22
#define WC_NR_EPOLL_PWAIT2 441
#define WC_NR_FUTEX_WAITV 449
#define WC_NR_FUTEX 98
#define WC_NR_WAIT4 260
#define WC_NR_WAITID 95

#endif
