/* The threads that exist when the capture starts, for both capture tools
 * (included by capture.bpf.h): a task iterator run once, just after
 * start_ns is set, gives each target thread its entry in `threads` as it
 * is then: on a CPU (running since before the start) or not, with its CPU
 * clock. Without it a thread's first switch seen in the window had to
 * tell, and a thread first seen leaving the CPU was taken to have run
 * since the start: a missed switch-in (they happen, see unseen_in) then
 * made an idle thread "run" for seconds, and a whole machine more than
 * its CPUs can give.
 *
 * With snap_stacks (system-wide, where /proc is not read for every
 * thread), a thread blocked at the start also gets its stack here, the
 * kernel stack and a copy of its user stack (a sleepable iterator may read
 * another process's memory), sent as any blocked thread's stack: the
 * thread is accounted from the start under the stack and state it is
 * blocked in, whether it wakes in the window or never. Otherwise its
 * stack comes from /proc (WC_ST_INIT, session.rs). */
#ifndef SNAPSHOT_BPF_H
#define SNAPSHOT_BPF_H

const volatile bool snap_stacks = false;
/* offcputime: a thread runnable at the start (preempted, waiting for a
 * CPU) gets its stack here in every capture, -p too: /proc gives none of
 * a thread in R (session.rs reads the blocked ones), so the wait until
 * its first run was [lost stack]. */
const volatile bool snap_runnable = false;

/* A stack event for a thread that is not current: kernel stack from
 * bpf_get_task_stack, user registers from its saved pt_regs, and (only
 * where the program may sleep) a copy of its user stack. */
static __always_inline int emit_task_stack(struct task_struct *t, __u64 fp, __u32 state, bool may_sleep)
{
	struct wc_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		stat_add(WC_STAT_RINGBUF_DROPS, 1);
		return -1;
	}
	e->fp = fp;
	e->ts = bpf_ktime_get_ns();
	e->pid = t->tgid;
	e->tid = t->pid;
	e->kind = 0;
	e->state = state;
	e->ip = e->sp = e->bp = e->lr = 0;
	e->kstack_bytes = 0;
	e->ustack_bytes = 0;
	e->py_n = 0;
	e->py_pad = 0;
	bpf_probe_read_kernel_str(&e->comm, sizeof(e->comm), t->comm);
	if (want_kstack) {
		long n = bpf_get_task_stack(t, e->kstack, sizeof(e->kstack), 0);
		e->kstack_bytes = n > 0 ? n : 0;
	}
	if (want_ustack && !(t->flags & PF_KTHREAD)) {
		struct pt_regs *regs = task_regs(t);
		__u64 sp = reg_sp(regs, false);
		e->ip = reg_ip(regs, false);
		e->sp = sp;
		e->bp = reg_fp(regs, false);
		e->lr = reg_lr(regs, false);
		if (!may_sleep) {
			/* Its context switches so far, for user space to tell
			 * whether it ran before the copy (py is unused here). */
			e->py_pad = WC_EV_USTACK_LATER;
			e->py[0].code = t->nvcsw + t->nivcsw;
			goto out;
		}
		/* 16K, else what is left of the stack's pages. */
		e->ustack_bytes = ustack_copy_task(e->ustack, 16384, sp, t);
		if (!e->ustack_bytes)
			stat_add(WC_STAT_USTACK_FAULTS, 1);
	}
out:
	bpf_ringbuf_submit(e, 0);
	stat_add(WC_STAT_NEW_STACKS, 1);
	return 0;
}

/* One task of the iterator. `may_sleep`: the sleepable iterator (5.18),
 * which copies a blocked thread's user stack; without it (snapshot_ns)
 * the event carries the thread's registers only and user space copies the
 * stack (tools/capture/src/kernel.rs says which is loaded). */
static __always_inline int snap_task(struct task_struct *t, bool may_sleep)
{
	__u64 s = start_ns;
	if (!t || !s || !is_target_x(t, true))
		return 0;
	__u32 tid = t->pid;
	struct wc_thread *had = bpf_map_lookup_elem(&threads, &tid);
	if (had) {
		had->snapped = 1;
		return 0;
	}
	/* Born since the start: its first switch-in begins it (thread_new). */
	if (t->start_time > s)
		return 0;
	/* Thousands of threads blocked at once would fill the ring buffer
	 * faster than it is drained: with it half full, this task is
	 * visited again by the next read() (a non-zero return is EAGAIN
	 * there), once the drain thread has made room. */
	if (snap_stacks && bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) * 2 > bpf_ringbuf_query(&events, BPF_RB_RING_SIZE))
		return 1;
	struct wc_thread *z = th_zeroed(WC_TS_SNAP); /* see thread_new */
	if (!z)
		return 0;
	z->pid = t->tgid;
	z->begin_ns = s;
	z->last_ts = s;
	z->snapped = 1;
	z->kthread = (t->flags & PF_KTHREAD) != 0;
	bpf_probe_read_kernel_str(&z->comm, sizeof(z->comm), t->comm);
	__u64 exec = t->se.sum_exec_runtime;
	if (t->on_cpu) {
		/* Running: its first slice is measured from the start (the
		 * steal of it from /proc's readings, see steal.rs); exec_base
		 * (not exec_known: the clock of a running task lags by up to a
		 * tick) bounds its on-CPU time at the stop if no switch is
		 * seen (steal::open_slice). */
		z->running = 1;
		z->exec_base = exec;
	} else if (task_state(t) & 0x80 /* TASK_DEAD */) {
		/* A zombie (its parent has not reaped it yet): it left the CPU
		 * for the last time before the start, and its kernel stack and
		 * memory are gone. Its life in the window is none: it ends where
		 * the window begins. Taken for blocked, it was a whole window
		 * of [lost stack] (a build's or a browser's unreaped children). */
		z->exit_ns = s;
		z->out_exec = exec;
	} else {
		z->out_exec = exec;
		z->cur_state = WC_ST_INIT;
		z->cur_fp = WC_FP_INIT;
		if (snap_stacks || (snap_runnable && task_state(t) == 0 /* TASK_RUNNING */)) {
			__u32 st = state_of(task_state(t));
			__u64 fp = mix(mix(0x5a9, tid), start_ns);
			if (fp < 16)
				fp += 16;
			if (!emit_task_stack(t, fp, st, may_sleep)) {
				z->cur_state = st;
				z->cur_fp = fp;
			}
		}
	}
	/* A switch seen since the start made the entry first: that one is
	 * right (the state read here may already be a later one). */
	if (bpf_map_update_elem(&threads, &tid, z, BPF_NOEXIST)) {
		had = bpf_map_lookup_elem(&threads, &tid);
		if (had)
			had->snapped = 1;
		else
			stat_add(WC_STAT_MAP_FULL, 1);
	}
	return 0;
}

SEC("iter.s/task")
int snapshot(struct bpf_iter__task *ctx)
{
	return snap_task(ctx->task, true);
}

SEC("iter/task")
int snapshot_ns(struct bpf_iter__task *ctx)
{
	return snap_task(ctx->task, false);
}

#endif
