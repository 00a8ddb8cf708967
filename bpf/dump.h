/* What `wallclock dump` reads of each thread (bpf/dump.bpf.c writes one
 * record per thread into the task iterator's output; tools/wcdump reads
 * them, with Rust types generated from this header by bindgen). */
#ifndef WALLCLOCK_DUMP_H
#define WALLCLOCK_DUMP_H

#define WCD_COMM_LEN 16
#define WCD_KSTACK_MAX 128
#define WCD_USTACK_MAX 16384

struct wcd_thread {
	__u64 now;	/* bpf_ktime_get_ns() at the visit */
	__u64 since;	/* when the thread entered its state, same clock (0: unknown) */
	__u64 exec_ns;	/* its CPU time (se.sum_exec_runtime) */
	__u64 start_ns;	/* its start (task->start_time, CLOCK_MONOTONIC) */
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u64 lr;	/* arm64's link register (x86-64: 0) */
	__u64 nsw;	/* its context switches at the visit (nvcsw + nivcsw) */
	__u32 pid;
	__u32 tid;
	__u32 state;	/* task->__state as read */
	__u32 exit_state;
	__u32 on_cpu;
	__u32 kthread;
	__u32 kstack_bytes;
	__u32 ustack_bytes;
	char comm[WCD_COMM_LEN];
	__u64 kstack[WCD_KSTACK_MAX];
	__u8 ustack[WCD_USTACK_MAX];
};

#endif
