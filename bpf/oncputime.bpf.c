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

/* The sampling period when samples are timed (the cpu clock), else 0:
 * set by user space from -F. */
const volatile __u64 period_ns = 0;

/* A sample due while the CPU switches tasks cannot fire there: __schedule
 * runs with interrupts off, and the timer's interrupt comes once they are
 * on again, in the task switched to. So the time a thread spends in its
 * switch-out path (a block: the syscall's last steps, then __schedule) was
 * sampled in the next task: under load, with a runnable task always
 * waiting, a thread that blocks every 200 us had 40% of its CPU time in
 * those paths sampled as its other code, and the exact on-CPU time scaled
 * to the wrong stacks. At each switch a sample overdue by the period's
 * clock is taken here for the task leaving (the time up to the switch's
 * stamp is its on-CPU time) and the late interrupt, when it comes, is not
 * counted again. `due`: when the next sample is due on this CPU, never
 * before its expiry (see on_sample); `moved`: a sample was taken at a
 * switch at this time. */
struct wc_cpu_tick {
	__u64 due;
	__u64 moved;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wc_cpu_tick);
} cpu_tick SEC(".maps");

/* A sample of `cur` (its thread entry created if new) with its stacks. */
static __always_inline void take_sample(void *ctx, struct task_struct *cur, __u64 now, __u32 kskip)
{
	__u32 tid = BPF_CORE_READ(cur, pid);
	struct wc_thread *th = bpf_map_lookup_elem(&threads, &tid);
	if (!th) {
		/* Running since before the capture (or its first switch). */
		th = thread_new(cur, now, WC_TS_SAMPLE);
		if (th) {
			th->running = 1;
		}
	}
	if (th)
		th->samples += 1;
	stat_add(WC_STAT_SAMPLES, 1);
	/* The interrupted registers are the user ones only when the sample hit
	 * user mode; otherwise take the saved user registers of the task. */
	struct pt_regs *regs = task_regs(cur);
	emit_stack(ctx, cur, regs, 0, 1, 0, now, kskip);
}

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	if (period_ns) {
		__u32 zero = 0;
		struct wc_cpu_tick *c = bpf_map_lookup_elem(&cpu_tick, &zero);
		if (c) {
			bool late = c->moved && now - c->moved < period_ns / 2;
			c->moved = 0;
			if (late) {
				/* The sample taken at the switch: c->due is already
				 * the next one, unless this came later still. */
				if (now >= c->due)
					c->due = now + period_ns;
				return 0;
			}
			/* The timer fires at or after its expiry, and its expiries
			 * are a grid (hrtimer_forward): the expected one and this
			 * firing both bound this expiry from above, so the lower of
			 * the two, a period on, bounds the next, tighter at each
			 * firing (a firing's latency alone, up to tens of us on a
			 * loaded VM, let a short slice's sample go by unseen). One
			 * a period late or more skipped expiries: start again. */
			__u64 base = now;
			if (c->due && c->due <= now && now - c->due < period_ns)
				base = c->due;
			c->due = base + period_ns;
		}
	}
	if (!window_open(now))
		return 0;
	struct task_struct *cur = current_task();
	if (!is_target(cur))
		return 0;
	take_sample(ctx, cur, now, 0);
	return 0;
}

/* At a switch (interrupts off): the sample due by now is prev's (see
 * struct wc_cpu_tick). */
static __always_inline int overdue(void *ctx, struct task_struct *prev, bool btf)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 zero = 0;
	struct wc_cpu_tick *c = bpf_map_lookup_elem(&cpu_tick, &zero);
	if (!c || !c->due || now < c->due || c->moved)
		return 0;
	/* A late interrupt skips no period (the timer's overrun is one
	 * firing): the next is due a period after this one. */
	c->moved = now;
	c->due += period_ns;
	if (window_open(now) && is_target_x(prev, btf))
		take_sample(ctx, current_task(), now, 2);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(tick_btf, bool preempt, struct task_struct *prev)
{
	return overdue(ctx, prev, true);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(tick_raw, bool preempt, struct task_struct *prev)
{
	return overdue(ctx, prev, false);
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
		struct wc_thread *th = thread_reborn(bpf_map_lookup_elem(&threads, &tid), prev, now, WC_TS_SWITCH);
		if (!th) {
			th = thread_new(prev, now, WC_TS_SWITCH);
		} else if (th->exit_ns) {
			th = NULL;
		} else if (!th->running) {
			close_off(th, unseen_in(th, prev, now, btf));
			th->running = 1;
		}
		if (th) {
			__u64 late = close_slice(th, prev, now, btf);
			/* A thread's life ends at its last switch: nothing follows it. */
			if (pstate & 0x80) {
				th->on_ns += late;
				late = 0;
			}
			th->last_ts = now - late;
			th->running = 0;
			if (pstate & 0x80) {
				th->exit_ns = now;
				BPF_CORE_READ_STR_INTO(&th->comm, prev, comm);
			}
		}
	}
	if (is_target_x(next, btf)) {
		__u32 tid = RD(btf, next, pid);
		struct wc_thread *th = thread_reborn(bpf_map_lookup_elem(&threads, &tid), next, now, WC_TS_SWITCH);
		if (!th)
			th = thread_new(next, now, WC_TS_SWITCH);
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
int switch_btf(__u64 *ctx)
{
	struct task_struct *prev = (void *)ctx[1], *next = (void *)ctx[2];
	return handle(prev, next, switch_prev_state(ctx, prev), true);
}

SEC("raw_tp/sched_switch")
int switch_raw(__u64 *ctx)
{
	struct task_struct *prev = (void *)ctx[1], *next = (void *)ctx[2];
	return handle(prev, next, switch_prev_state(ctx, prev), false);
}

char LICENSE[] SEC("license") = "GPL";
