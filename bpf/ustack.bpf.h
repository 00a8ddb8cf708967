/* Copying a thread's user stack from its stack pointer up: the one place
 * the BPF programs do it (capture.bpf.h's fill_stack and snapshot.bpf.h,
 * dump.bpf.c's tick and iterator). `max` is the destination's size, a
 * constant multiple of the page size at every call (the functions are
 * inlined, so the verifier sees each call's bounds); each returns the
 * bytes copied, 0 when not one page could be read: a caller that counts
 * faults counts those. */
#ifndef USTACK_BPF_H
#define USTACK_BPF_H

/* The current thread's stack: `max` bytes, else page by page all that can
 * be read up to `max`. One unmapped byte fails a whole read: a page the
 * thread never touched (inside a large frame: OpenBLAS's 12K
 * dgemm_thread_nn) is not present, and the end of the stack's mapping is
 * not mapped. A failed page reads as zeros (the helper clears it) and the
 * copy goes on: the words an unwinder reads (return addresses, saved
 * registers) were written, so their pages are present. */
static __always_inline __u32 ustack_copy_current(void *dst, __u32 max, __u64 sp)
{
	if (!bpf_probe_read_user(dst, max, (void *)sp))
		return max;
	__u32 got = 0, off = 0, len = 4096 - (sp & 4095);
	for (int k = 0; k < max / 4096; k++) {
		if (off > max - 4096 || len > 4096)
			break;
		if (!bpf_probe_read_user((__u8 *)dst + off, len, (void *)(sp + off)))
			got = off + len;
		off += len;
		len = 4096;
	}
	return got;
}

/* Another thread's stack, from a sleepable program (pages not present are
 * faulted in, so what fails is the end of the mapping): `max` bytes, else
 * the longest of its first page's rest plus whole pages that reads. */
static __always_inline __u32 ustack_copy_task(void *dst, __u32 max, __u64 sp, struct task_struct *t)
{
	if (!bpf_copy_from_user_task(dst, max, (void *)sp, t, 0))
		return max;
	__u32 head = 4096 - (sp & 4095);
	for (int k = max / 4096 - 1; k >= 0; k--) {
		__u32 len = head + k * 4096;
		if (len > max)
			continue;
		if (!bpf_copy_from_user_task(dst, len, (void *)sp, t, 0))
			return len;
	}
	return 0;
}

#endif
