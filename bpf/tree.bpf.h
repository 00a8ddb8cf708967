/* Process trees, for both capture tools (included by capture.bpf.h, so
 * offcputime.bpf.c and oncputime.bpf.c get these programs unchanged):
 * - sched_process_fork: a new process (not a thread) of a traced process
 *   joins `tgids` before it first runs (the tracepoint fires before
 *   wake_up_new_task), so it is followed from its first instruction;
 * - sched_process_exec: a traced process changed its image.
 * Both tell user space in the stack ring buffer, in order with the stacks:
 * the stacks of a process before its exec event are unwound against its
 * old mappings (a fork child's are its parent's), the ones after against
 * the new. Marker events carry no stack. */
#ifndef TREE_BPF_H
#define TREE_BPF_H

#define WC_KIND_EXEC 2 /* pid, tid; fp: inode of the new executable */
#define WC_KIND_FORK 3 /* pid, tid: the child; fp: the parent's tgid */

static __always_inline void emit_marker(__u32 kind, __u32 pid, __u32 tid, __u64 fp)
{
	struct wc_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		stat_add(WC_STAT_RINGBUF_DROPS, 1);
		return;
	}
	e->fp = fp;
	e->ts = bpf_ktime_get_ns();
	e->ip = e->sp = e->bp = e->lr = 0;
	e->pid = pid;
	e->tid = tid;
	e->kind = kind;
	e->state = 0;
	e->kstack_bytes = 0;
	e->ustack_bytes = 0;
	e->comm[0] = 0;
	bpf_ringbuf_submit(e, 0);
}

static __always_inline int on_fork(struct task_struct *parent, struct task_struct *child, bool btf)
{
	__u32 ptgid = RD(btf, parent, tgid);
	__u32 ctgid = RD(btf, child, tgid);
	if (ptgid == ctgid)
		return 0; /* a thread: its process is traced already or not at all */
	if (ptgid != single_tgid && !bpf_map_lookup_elem(&tgids, &ptgid))
		return 0;
	__u8 one = 1;
	if (bpf_map_update_elem(&tgids, &ctgid, &one, BPF_ANY)) {
		stat_add(WC_STAT_MAP_FULL, 1);
		return 0;
	}
	tree_grown = 1;
	emit_marker(WC_KIND_FORK, ctgid, RD(btf, child, pid), ptgid);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(fork_btf, struct task_struct *parent, struct task_struct *child)
{
	return on_fork(parent, child, true);
}

SEC("raw_tp/sched_process_fork")
int BPF_PROG(fork_raw, struct task_struct *parent, struct task_struct *child)
{
	return on_fork(parent, child, false);
}

/* The held process (capture.bpf.h) execs its command: from now on it is a
 * target, running (this tracepoint fires in the exec'ing task), its first
 * slice measured from here. Any later exec is an ordinary one. */
static __always_inline void held_exec(struct task_struct *p, __u64 now, bool btf)
{
	struct wc_thread *z = th_zeroed(WC_TS_EXEC); /* see thread_new */
	if (!z)
		return;
	__u32 tid = RD(btf, p, pid);
	z->pid = RD(btf, p, tgid);
	z->begin_ns = now;
	z->last_ts = now;
	z->running = 1;
	z->kthread = 0;
	BPF_CORE_READ_STR_INTO(&z->comm, p, comm);
	z->exec_base = RD(btf, p, se.sum_exec_runtime);
	z->exec_known = 1;
	if (bpf_map_update_elem(&threads, &tid, z, BPF_ANY))
		stat_add(WC_STAT_MAP_FULL, 1);
	exec_ns = now;
	held_tgid = 0;
}

static __always_inline int on_exec(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm, bool btf)
{
	__u32 held = held_tgid;
	if (held && RD(btf, p, tgid) == held) {
		__u64 now = bpf_ktime_get_ns();
		if (!window_open(now))
			return 0;
		held_exec(p, now, btf);
	}
	if (!is_target_x(p, btf))
		return 0;
	note_dethread(RD(btf, p, pid), old_pid);
	__u64 ino = BPF_CORE_READ(bprm, file, f_inode, i_ino);
	emit_marker(WC_KIND_EXEC, RD(btf, p, tgid), RD(btf, p, pid), ino);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(exec_btf, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	return on_exec(p, old_pid, bprm, true);
}

SEC("raw_tp/sched_process_exec")
int BPF_PROG(exec_raw, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	return on_exec(p, old_pid, bprm, false);
}

#endif
