// SPDX-License-Identifier: GPL-2.0
/* On-CPU sampling: a software cpu-clock perf event on every CPU, filtered
 * to the target here, sends each sample's stacks to user space (kernel
 * stack + a copy of the user stack, unwound there with .eh_frame).
 * With --exact, sched_switch also measures each thread's exact on-CPU
 * time, so that samples can be scaled to it (loaded only then: it costs
 * every context switch of the target). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "capture.bpf.h"
#include "probe.bpf.h" /* --probe: events only (spans are offcputime's) */

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	if (!window_open(now))
		return 0;
	struct task_struct *cur = bpf_get_current_task_btf();
	if (!is_target(cur))
		return 0;
	__u32 tid = BPF_CORE_READ(cur, pid);
	struct wc_thread *th = bpf_map_lookup_elem(&threads, &tid);
	if (!th) {
		/* Running since before the capture (or its first switch). */
		th = thread_new(cur, now);
		if (th) {
			th->running = 1;
		}
	}
	if (th)
		th->samples += 1;
	stat_add(WC_STAT_SAMPLES, 1);
	/* The interrupted registers are the user ones only when the sample hit
	 * user mode; otherwise take the saved user registers of the task. */
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(cur);
	emit_stack(ctx, cur, regs, 0, 1, 0, now, 0);
	return 0;
}

/* Off-CPU time is one sum here (no stacks): see close_slice. */
static __always_inline void off_taken_back(struct wc_thread *th, __u64 ns)
{
	th->off_ns[0] -= ns;
}

/* The thread was off-CPU from th->last_ts to `to`. */
static __always_inline void close_off(struct wc_thread *th, __u64 to)
{
	th->last_off = to - th->last_ts;
	th->off_ns[0] += th->last_off;
	th->last_ts = to;
}

static __always_inline int handle(struct task_struct *prev, struct task_struct *next, unsigned int pstate, bool btf)
{
	__u64 now = bpf_ktime_get_ns();
	if (!window_open(now))
		return 0;
	if (is_target_x(prev, btf)) {
		__u32 tid = RD(btf, prev, pid);
		struct wc_thread *th = bpf_map_lookup_elem(&threads, &tid);
		if (!th) {
			th = thread_new(prev, now);
		} else if (th->exit_ns) {
			th = NULL;
		} else if (!th->running) {
			close_off(th, unseen_in(th, prev, now, btf));
			th->running = 1;
		}
		if (th) {
			close_slice(th, prev, now, btf);
			th->last_ts = now;
			th->running = 0;
			if (pstate & 0x80) {
				th->exit_ns = now;
				BPF_CORE_READ_STR_INTO(&th->comm, prev, comm);
			}
		}
	}
	if (is_target_x(next, btf)) {
		__u32 tid = RD(btf, next, pid);
		struct wc_thread *th = bpf_map_lookup_elem(&threads, &tid);
		if (!th)
			th = thread_new(next, now);
		if (th && th->running && !th->exit_ns && !unseen_out(th, next, now, btf))
			th = NULL;
		if (th && !th->exit_ns) {
			close_off(th, now);
			th->running = 1;
			open_slice(th, next, btf);
		}
	}
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	return handle(prev, next, prev_state, true);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	return handle(prev, next, prev_state, false);
}

char LICENSE[] SEC("license") = "GPL";
