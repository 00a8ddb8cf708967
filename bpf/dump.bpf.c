// SPDX-License-Identifier: GPL-2.0
/* `wallclock dump PID`: one pass of a sleepable task iterator over the
 * target's threads, each written whole into the iterator's output (no
 * ring buffer, no capture window): its state, since when it is in it, its
 * kernel stack and a copy of its user stack (unwound in user space with
 * .eh_frame, as the capture's stacks are). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "compat.bpf.h"
#include "dump.h"
#include "ustack.bpf.h"

char LICENSE[] SEC("license") = "GPL";

const volatile __u32 target_tgid = 0;

/* The record is bigger than the BPF stack: one per CPU (the iterator
 * runs with migration disabled). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wcd_thread);
} scratch SEC(".maps");

/* The scheduler stamps switches with its per-CPU clocks: rq->clock
 * (sched_clock) for sched_info, rq->clock_task (that less the time of
 * interrupts and steal on that CPU) for se.exec_start. Both are taken to
 * bpf_ktime_get_ns() here: clock - clock_task of the thread's CPU, and
 * ktime - clock of this CPU, whose clock was updated when this reader
 * last came on it or at its last tick (a few ms at most). A CPU's rq is
 * reached through a cfs_rq of it (this kernel's kallsyms has no data
 * symbols, so the per-CPU `runqueues` cannot be named). */
static __always_inline __u64 since_of(struct task_struct *t, __u64 now)
{
	struct task_struct *cur = current_task();
	struct rq *me = BPF_CORE_READ(cur, se.cfs_rq, rq);
	struct rq *rq = BPF_CORE_READ(t, se.cfs_rq, rq);
	if (!me || !rq)
		return 0;
	__u64 my_clock = BPF_CORE_READ(me, clock);
	__u64 clock = BPF_CORE_READ(rq, clock), clock_task = BPF_CORE_READ(rq, clock_task);
	__s64 to_ktime = (__s64)now - (__s64)my_clock;
	__u64 stamp;
	if (BPF_CORE_READ(t, on_cpu)) {
		stamp = BPF_CORE_READ(t, sched_info.last_arrival);
	} else if (task_state(t) == 0 && BPF_CORE_READ(t, sched_info.last_queued)) {
		stamp = BPF_CORE_READ(t, sched_info.last_queued);
	} else if (task_state(t) != 0 && BPF_CORE_READ(t, sched_info.last_arrival)) {
		/* Blocked since the end of its last slice: its last switch-in
		 * (rq->clock) plus what its clock ran since (sum_exec_runtime
		 * less its value at that pick). The slice's own interrupt time
		 * is all this leaves out. Its exec_start (rq->clock_task) taken
		 * to rq->clock with that CPU's interrupt and steal time *now*
		 * was late by all of it since the thread left: 109 ms for a
		 * thread asleep 2.3 s on a busy VM. */
		stamp = BPF_CORE_READ(t, sched_info.last_arrival) + (BPF_CORE_READ(t, se.sum_exec_runtime) - BPF_CORE_READ(t, se.prev_sum_exec_runtime));
	} else {
		/* Left the CPU at its last exec_start (update_curr on the
		 * way out); 0 after a migration on wake-up. */
		if (!BPF_CORE_READ(t, se.exec_start))
			return 0;
		stamp = BPF_CORE_READ(t, se.exec_start) + (clock - clock_task);
	}
	if (!stamp)
		return 0;
	__u64 since = stamp + to_ktime;
	return since > now ? now : since;
}

/* A running thread's record, taken on it (`dump_tick`), by tid. Its
 * entries are allocated as ticks write them: preallocated, 4096 records
 * of 17 KB were 70 MB zeroed on every dump for the few threads that run
 * at the visit. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct wcd_thread);
} ticks SEC(".maps");

static __always_inline void fill(struct wcd_thread *e, struct task_struct *t)
{
	e->now = bpf_ktime_get_ns();
	e->since = since_of(t, e->now);
	e->exec_ns = BPF_CORE_READ(t, se.sum_exec_runtime);
	e->nsw = BPF_CORE_READ(t, nvcsw) + BPF_CORE_READ(t, nivcsw);
	e->start_ns = BPF_CORE_READ(t, start_time);
	e->pid = BPF_CORE_READ(t, tgid);
	e->tid = BPF_CORE_READ(t, pid);
	e->state = task_state(t);
	e->exit_state = BPF_CORE_READ(t, exit_state);
	e->on_cpu = BPF_CORE_READ(t, on_cpu);
	e->kthread = (BPF_CORE_READ(t, flags) & 0x00200000 /* PF_KTHREAD */) != 0;
	bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), t->comm);
	e->ip = e->sp = e->bp = 0;
	e->ustack_bytes = 0;
}

/* A thread on a CPU when the iterator visits it has moved on from the
 * registers it saved at its last kernel entry: its stack above them is
 * another stack by then (a dump of a Node thread read `getpid` under a
 * garbage collection long over, then a stack word taken for a return
 * address). wcdump opens a CPU-clock event on each such thread; this
 * takes the thread's registers and stacks at its next tick, on its own
 * CPU, where they agree, once per thread. */
SEC("perf_event")
int dump_tick(struct bpf_perf_event_data *ctx)
{
	struct task_struct *t = current_task();
	__u32 zero = 0, tid = BPF_CORE_READ(t, pid);
	if (BPF_CORE_READ(t, tgid) != target_tgid || bpf_map_lookup_elem(&ticks, &tid))
		return 0;
	struct wcd_thread *e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return 0;
	fill(e, t);
	e->on_cpu = 1;
	/* Interrupted in the kernel, its kernel stack; in user mode, none. */
	long n = bpf_get_stack(ctx, e->kstack, sizeof(e->kstack), 0);
	e->kstack_bytes = n > 0 ? n : 0;
	if (!e->kthread) {
		/* The user registers, saved on entry from user mode (by this
		 * very interrupt when it came from there). */
		struct pt_regs *regs = task_regs(t);
		__u64 sp = reg_sp(regs, false);
		e->ip = reg_ip(regs, false);
		e->sp = sp;
		e->bp = reg_fp(regs, false);
		e->lr = reg_lr(regs, false);
		/* The whole copy, else page by page (as the capture copies
		 * it); wcdump counts no faults. */
		e->ustack_bytes = ustack_copy_current(e->ustack, WCD_USTACK_MAX, sp);
	}
	bpf_map_update_elem(&ticks, &tid, e, BPF_NOEXIST);
	return 0;
}

/* One task of the iterator. `may_sleep`: the sleepable iterator (5.18)
 * copies a blocked thread's user stack; before, dump_task_ns leaves it
 * to wcdump, which copies it from the saved stack pointer
 * (process_vm_readv: the thread is blocked, its stack as it was). */
static __always_inline int dump_one(struct seq_file *seq, struct task_struct *t, bool may_sleep)
{
	__u32 zero = 0;
	if (!t || t->tgid != target_tgid)
		return 0;
	struct wcd_thread *e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return 0;
	fill(e, t);
	long n = bpf_get_task_stack(t, e->kstack, sizeof(e->kstack), 0);
	e->kstack_bytes = n > 0 ? n : 0;
	if (!e->kthread && !e->exit_state) {
		struct pt_regs *regs = task_regs(t);
		__u64 sp = reg_sp(regs, false);
		e->ip = reg_ip(regs, false);
		e->sp = sp;
		e->bp = reg_fp(regs, false);
		e->lr = reg_lr(regs, false);
		/* One unmapped byte fails a whole copy: 16K, else what is left
		 * of the stack's last pages. */
		if (may_sleep)
			e->ustack_bytes = ustack_copy_task(e->ustack, WCD_USTACK_MAX, sp, t);
	}
	bpf_seq_write(seq, e, sizeof(*e));
	return 0;
}

SEC("iter.s/task")
int dump_task(struct bpf_iter__task *ctx)
{
	return dump_one(ctx->meta->seq, ctx->task, true);
}

SEC("iter/task")
int dump_task_ns(struct bpf_iter__task *ctx)
{
	return dump_one(ctx->meta->seq, ctx->task, false);
}
