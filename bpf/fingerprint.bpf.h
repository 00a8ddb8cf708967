/* The fingerprint of a user thread's place as it leaves the CPU
 * (offcputime.bpf.c, switch_out): the same call path must give the same
 * fingerprint at every block, or each block costs a stack copy (and an
 * offcpu entry), and two call paths must never share one, or one's time
 * goes under the other's stack.
 *
 * What names a call path is its return addresses. The registers give the
 * leaf (ip; the syscall number; sp, the stack depth); the callers are
 * return addresses in the stack above sp. The top of the stack also holds
 * data: a deadline, a loop counter, a pointer to a buffer, new at each
 * block of a poll loop or a timer. Mixing those words in (six of them, as
 * before) gave such a thread a new fingerprint per block: under load its
 * 16-64K stack copies filled the ring buffer and the offcpu map, and the
 * time of the blocks that found them full went to [lost stack]. So of
 * the first WC_FP_WORDS words above sp (and, where bp points into the
 * stack, the word above the frame it points to) only the return
 * addresses are mixed: words that could be a user code address and that
 * follow a call instruction in memory. A data word that happens to pass
 * costs at most an extra copy; a return address is never left out (every
 * x86-64 call leaves one right after a call instruction). Two paths that
 * differ only in callers deeper than the window are one fingerprint, as
 * they were with six words. */
#ifndef FINGERPRINT_BPF_H
#define FINGERPRINT_BPF_H

#define WC_FP_WORDS 32
/* bp is a frame pointer when it points this far above sp at most. */
#define WC_FP_BP_SPAN (1 << 20)

/* Could v be a user code address (not a small number, not a kernel
 * address, not a pointer into this stack)? Arithmetic only. */
static __always_inline bool code_candidate(__u64 v, __u64 sp)
{
	if (v < 0x10000 || v >= WC_USER_TOP)
		return false;
	return v - (sp - WC_FP_BP_SPAN) >= 2 * WC_FP_BP_SPAN;
}

/* Does the instruction before v (a candidate) end at v and is it a call:
 * call rel32 (e8, 5 bytes) or call r/m64 (ff /2: 2, 3, 4, 6 or 7 bytes
 * with its ModRM, SIB and displacement)? One 8-byte read of code that
 * has just run (resident); a failed read is taken for data. A global
 * function: verified once, not at each of the loop's 33 calls (which
 * added 350 ms to the attach). */
__noinline int wc_after_call(__u64 v)
{
	__u8 c[8] = {};
	if (bpf_probe_read_user(c, sizeof(c), (void *)(v - 8)))
		return false;
	return ends_with_call(c);
}

/* wc_after_call(v) for process tgid, remembered in a slot of the CPU's
 * memo `ac` for the rest of the second `sec` (the time >> 30: code freed
 * and made anew at v, by a JIT, is read again within about a second).
 * A slot: v | sec << 48 | the answer << 63 (v < WC_USER_TOP <= 2^48),
 * and the tgid (one address is other code in another process).
 *
 * The thread's two-place memo (stack_part) misses whenever one data
 * word among the candidates changed: a JVM thread blocking where it
 * blocked before had 20-30 candidates, most of them code or metadata
 * pointers met at every block, each read again at 60-120 ns
 * (2.6-3.1 us a switch-out on a busy Java server, against 0.5 us with
 * no stack words). */
static __always_inline bool after_call_memo(__u64 (*ac)[2], __u64 v, __u64 tgid, __u64 sec)
{
	__u32 slot = (__u32)(v ^ v >> 9 ^ v >> 21 ^ tgid) & (WC_AC_SLOTS - 1);
	__u64 e = ac[slot][0];
	if ((e & 0xffffffffffffULL) == v && ((e >> 48) & 0x7fff) == sec && ac[slot][1] == tgid)
		return e >> 63;
	bool r = wc_after_call(v);
	ac[slot][0] = v | sec << 48 | (__u64)r << 63;
	ac[slot][1] = tgid;
	return r;
}

/* The part of the fingerprint the stack gives: the return addresses
 * among the words w[0..n) (w[WC_FP_WORDS]: the one above bp's frame).
 * Checking a word reads code, so the result is kept per thread with a
 * hash of the candidates it came from, for its last two places: a thread
 * blocking where it blocked before, whatever its data words, costs no
 * read; and per word, per CPU (after_call_memo). */
static __noinline __u64 stack_part(struct wc_thread *th, __u64 *w, __u64 (*ac)[2], __u64 sp, __u64 bp_off)
{
	__u64 cand = mix(0x5eed, bp_off);
	/* One mix a candidate, its place in the top bits (a candidate is
	 * below WC_USER_TOP, 2^47 or 2^48): the 33 words are scanned at
	 * every switch-out. */
	for (int i = 0; i <= WC_FP_WORDS; i++) {
		__u64 v = w[i];
		if (code_candidate(v, sp))
			cand = mix(cand, v | (__u64)i << 56);
	}
	cand |= 1; /* never 0, the empty entry */
	if (th->fp_cand[0] == cand)
		return th->fp_ret[0];
	if (th->fp_cand[1] == cand)
		return th->fp_ret[1];
	__u64 ret = mix(0x7e7, bp_off);
	__u64 sec = (th->last_ts >> 30) & 0x7fff, tgid = th->pid;
	for (int i = 0; i <= WC_FP_WORDS; i++) {
		__u64 v = w[i];
		if (code_candidate(v, sp) && after_call_memo(ac, v, tgid, sec))
			ret = mix(mix(ret, i), v);
	}
	/* Two places: a thread blocks in one and is preempted in another
	 * (a pipe's reader woken by a write of its peer's, on one CPU). */
	th->fp_cand[1] = th->fp_cand[0];
	th->fp_ret[1] = th->fp_ret[0];
	th->fp_cand[0] = cand;
	th->fp_ret[0] = ret;
	return ret;
}

/* The fingerprint of a user thread's call path (see the top of this
 * file): registers and return addresses. */
static __noinline __u64 user_fp(struct wc_thread *th, __u64 ip, __u64 sp, __u64 bp, __u64 nr)
{
	__u64 fp = mix(0, ip);
	fp = mix(fp, sp);
	/* The syscall number; for an interrupted thread, -1 whatever the
	 * vector (timer or IPI) that stopped it, and bp whatever it holds: a
	 * thread preempted in user code has a new ip at most preemptions
	 * anyway, and bp (a callee-saved register, set by the callers) tells
	 * apart paths that differ deeper than the words below reach. */
	if ((long)nr < 0)
		fp = mix(mix(fp, (__u64)-1), bp);
	else
		fp = mix(fp, nr);
	__u32 zero = 0;
	struct kscratch *ks = bpf_map_lookup_elem(&kscratch, &zero);
	if (!ks)
		return fp;
	__u64 *w = ks->ips;
	bool whole = !bpf_probe_read_user(w, WC_FP_WORDS * 8, (void *)sp);
	if (!whole) {
		/* Within WC_FP_WORDS words of the stack's end (the thread's
		 * outermost frames): what is left of the page. A failed read
		 * leaves zeros, which are no candidates. */
		__u32 left = 4096 - (sp & 4095);
		if (left < WC_FP_WORDS * 8)
			bpf_probe_read_user(w, left & (WC_FP_WORDS * 8 - 1), (void *)sp);
	}
	/* A frame pointer: bp in this stack above sp. The return address
	 * above its frame reaches past the window in code built with frame
	 * pointers. Elsewhere bp is a register like any, data. */
	__u64 bp_off = 0;
	w[WC_FP_WORDS] = 0;
	if (bp > sp && bp - sp < WC_FP_BP_SPAN) {
		bp_off = bp - sp;
		/* Inside the words just read: no second read (a frame of
		 * the leaf's caller, most often). */
		__u64 at = bp_off + 8;
		if (whole && !(at & 7) && at < WC_FP_WORDS * 8)
			w[WC_FP_WORDS] = w[(at >> 3) & (WC_FP_WORDS - 1)];
		else
			bpf_probe_read_user(&w[WC_FP_WORDS], 8, (void *)(bp + 8));
	}
	return mix(fp, stack_part(th, w, ks->ac, sp, bp_off));
}

/* --no-objects: no object per block (the cost of objects measured). */
const volatile bool want_objects = true;

/* The object a block waits on (struct wc_okey), into th->cur_obj and
 * th->cur_oref; the fd of a syscall whose object is a file (-1 else).
 * Each architecture's syscall numbers (regs.bpf.h). One user read for
 * a poll of one fd. */
static __always_inline long block_obj(struct wc_thread *th, struct pt_regs *regs, __u64 nr, bool btf)
{
	switch (nr) {
	WC_FD_SYSCALLS
		return (long)reg_arg0(regs, btf);
	default:
		break;
	}
	if (!want_objects)
		return -1;
	__u32 kind = WC_OBJ_NONE, n = 0;
	__u64 obj = 0;
	switch (nr) {
	case WC_NR_POLL: case WC_NR_PPOLL: { /* one fd is that fd's wait */
		__u64 nfds = reg_arg1(regs, btf);
		if (nfds == 1) {
			int fd = -1;
			bpf_probe_read_user(&fd, sizeof(fd), (void *)reg_arg0(regs, btf));
			return fd;
		}
		kind = WC_OBJ_MANY;
		obj = nr;
		n = nfds;
		break;
	}
	case WC_NR_SELECT: case WC_NR_PSELECT6: /* n, the highest fd + 1 */
	case WC_NR_EPOLL_WAIT: case WC_NR_EPOLL_PWAIT: case WC_NR_EPOLL_PWAIT2: /* n, the epoll fd */
		kind = WC_OBJ_MANY;
		obj = nr;
		n = reg_arg0(regs, btf);
		break;
	case WC_NR_FUTEX_WAITV: /* n, the futexes */
		kind = WC_OBJ_MANY;
		obj = nr;
		n = reg_arg1(regs, btf);
		break;
	case WC_NR_FUTEX:
		kind = WC_OBJ_FUTEX;
		obj = reg_arg0(regs, btf);
		break;
	case WC_NR_WAIT4:
		kind = WC_OBJ_CHILD;
		obj = (__u64)(__s64)(int)reg_arg0(regs, btf);
		break;
	case WC_NR_WAITID: /* P_PID (1) names one */
		kind = WC_OBJ_CHILD;
		obj = reg_arg0(regs, btf) == 1 ? (__u64)(__s64)(int)reg_arg1(regs, btf) : (__u64)-1;
		break;
	default:
		break;
	}
	th->cur_obj = obj;
	th->cur_oref = WC_OREF(kind, n);
	return -1;
}

/* The file a syscall blocks on, for the syscalls whose object is a file
 * descriptor (block_obj): the mix of its file operations and, for a
 * socket, its protocol's. The kernel path under one user call site
 * depends on it (a read() wrapper blocks in pipe_read for a pipe, in
 * unix_stream_read_generic for a socket), and the kernel stack is not in
 * the fingerprint: walking it at each switch doubles the capture's cost
 * in a context-switch storm (57% of the throughput lost against 29%,
 * even for 4 frames). Without this, the second kind's blocks took the
 * first kind's kernel stack. 0 for any other syscall. With objects, the
 * file's inode number and fd are the block's object (th->cur_obj and
 * cur_oref, cleared by the caller). */
/* The file table's slot read with a plain load (bpf_rdonly_cast to void);
 * cleared where the kernel refuses it. */
const volatile bool slot_cast = true;

static __always_inline __u64 fd_kind(struct wc_thread *th, struct task_struct *cur, struct pt_regs *regs, __u64 nr, bool btf)
{
	long fd = block_obj(th, regs, nr, btf);
	if (fd < 0)
		return 0;
	/* Plain loads through the BTF pointers where the program has them
	 * (one helper call for the table's slot): reading each field with a
	 * helper cost 300 ns a switch in a storm. */
	struct files_struct *files = RD(btf, cur, files);
	if (!files)
		return 0;
	struct fdtable *fdt = RD(btf, files, fdt);
	if (!fdt || fd >= RD(btf, fdt, max_fds))
		return 0;
	struct file **fds = RD(btf, fdt, fd);
	struct file *f = 0;
	/* bpf_rdonly_cast exists from 6.2, its cast to void (memory read
	 * with plain loads) later: user space loads with slot_cast and, if
	 * the verifier refuses the cast, again without (driver.rs). */
	bool core_cast = btf && bpf_ksym_exists(bpf_rdonly_cast);
	if (core_cast && slot_cast) {
		__u64 *slots = bpf_rdonly_cast(fds, 0);
		f = (struct file *)slots[fd & 0xffffff];
	} else if (bpf_probe_read_kernel(&f, sizeof(f), (void *)((__u64)fds + (fd & 0xffffff) * 8))) {
		return 0;
	}
	if (!f)
		return 0;
	if (core_cast) {
		/* The pointers' values through a map slot: the verifier lets a
		 * privileged program store a pointer there and read a number. */
		__u32 zero = 0;
		struct kscratch *ks = bpf_map_lookup_elem(&kscratch, &zero);
		if (!ks)
			return 0;
		struct file *bf = bpf_core_cast(f, struct file);
		ks->ips[0] = (__u64)bf->f_op;
		ks->ips[1] = 0;
		struct inode *ino = bf->f_inode;
		if (want_objects) {
			th->cur_obj = ino->i_ino;
			th->cur_oref = WC_OREF(WC_OBJ_FD, fd);
		}
		if ((ino->i_mode & 0170000) == 0140000 /* S_IFSOCK */)
			ks->ips[1] = (__u64)bpf_core_cast(bf->private_data, struct socket)->ops;
		asm volatile("" ::: "memory");
		return mix(ks->ips[0], ks->ips[1]);
	}
	__u64 kind = (__u64)BPF_CORE_READ(f, f_op);
	if (want_objects) {
		th->cur_obj = BPF_CORE_READ(f, f_inode, i_ino);
		th->cur_oref = WC_OREF(WC_OBJ_FD, fd);
	}
	if ((BPF_CORE_READ(f, f_inode, i_mode) & 0170000) == 0140000 /* S_IFSOCK */) {
		struct socket *sock = BPF_CORE_READ(f, private_data);
		kind = mix(kind, (__u64)BPF_CORE_READ(sock, ops));
	}
	return kind;
}

#endif
