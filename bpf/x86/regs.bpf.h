/* x86-64's side of what differs between the architectures the capture
 * programs are built for (bpf/arm64/regs.bpf.h is the other): the user
 * registers in struct pt_regs, the syscall numbers fd_kind() knows, how a
 * call instruction ends, the thread pointer and its dtv. btf: the pointer
 * may be read with plain loads (a BTF pointer), else with BPF_CORE_READ. */
#ifndef REGS_BPF_H
#define REGS_BPF_H

#define WC_RD(btf, p, f) ((btf) ? (p)->f : BPF_CORE_READ(p, f))

static __always_inline __u64 reg_ip(struct pt_regs *r, bool btf) { return WC_RD(btf, r, ip); }
static __always_inline __u64 reg_sp(struct pt_regs *r, bool btf) { return WC_RD(btf, r, sp); }
/* The frame pointer (rbp). */
static __always_inline __u64 reg_fp(struct pt_regs *r, bool btf) { return WC_RD(btf, r, bp); }
/* No link register: a call leaves its return address on the stack. */
static __always_inline __u64 reg_lr(struct pt_regs *r, bool btf) { return 0; }
/* The syscall number; negative when the thread entered the kernel
 * otherwise (an interrupt). */
static __always_inline __u64 reg_nr(struct pt_regs *r, bool btf) { return WC_RD(btf, r, orig_ax); }
/* A syscall's first argument, as it entered. */
static __always_inline __u64 reg_arg0(struct pt_regs *r, bool btf) { return WC_RD(btf, r, di); }
/* Its second. */
static __always_inline __u64 reg_arg1(struct pt_regs *r, bool btf) { return WC_RD(btf, r, si); }

/* User addresses lie below this (47-bit address space). */
#define WC_USER_TOP 0x800000000000ULL

/* The syscalls whose first argument is a file descriptor and that can
 * block (fingerprint.bpf.h, fd_kind), by x86-64's numbers. */
#define WC_FD_SYSCALLS \
	case 0: case 1: case 16: case 17: case 18: case 19: case 20: /* read write ioctl pread pwrite readv writev */ \
	case 40: case 42: case 43: case 44: case 45: case 46: case 47: /* sendfile connect accept sendto recvfrom sendmsg recvmsg */ \
	case 72: case 73: case 74: case 75: case 77: case 217: /* fcntl flock fsync fdatasync ftruncate getdents64 */ \
	case 275: case 276: case 277: case 285: case 288: /* splice tee sync_file_range fallocate accept4 */ \
	case 295: case 296: case 299: case 307: case 326: case 327: case 328: /* preadv pwritev recvmmsg sendmmsg copy_file_range preadv2 pwritev2 */

/* Do the 8 bytes before a return address candidate end with a call:
 * call rel32 (e8, 5 bytes) or call r/m64 (ff /2: 2, 3, 4, 6 or 7 bytes
 * with its ModRM, SIB and displacement)? */
static __always_inline bool ends_with_call(const __u8 *c)
{
	if (c[3] == 0xe8)
		return true;
#define WC_CALL_RM(k) (c[8 - (k)] == 0xff && ((c[9 - (k)] >> 3) & 7) == 2)
	return WC_CALL_RM(2) || WC_CALL_RM(3) || WC_CALL_RM(4) || WC_CALL_RM(6) || WC_CALL_RM(7);
#undef WC_CALL_RM
}

/* The thread pointer of a task (fsbase), and where glibc's TCB there
 * keeps the dtv (variant II: the TCB is at the thread pointer, its dtv
 * the second word). */
#define WC_TASK_TP(t) BPF_CORE_READ(t, thread.fsbase)
#define WC_TP_DTV 8

/* The syscalls whose object a block records (fingerprint.bpf.h,
 * block_obj), by x86-64's numbers.
 * tools/capture/build.rs reads these defines and WC_FD_SYSCALLS into
 * user space's table (wallclock_capture::arch::nr): one list. */
#define WC_NR_POLL 7
#define WC_NR_PPOLL 271
#define WC_NR_SELECT 23
#define WC_NR_PSELECT6 270
#define WC_NR_EPOLL_WAIT 232
#define WC_NR_EPOLL_PWAIT 281
#define WC_NR_EPOLL_PWAIT2 441
#define WC_NR_FUTEX_WAITV 449
#define WC_NR_FUTEX 202
#define WC_NR_WAIT4 61
#define WC_NR_WAITID 247

#endif
