/* A thread that execs in a multithreaded process takes its leader's tid
 * (de_thread: the leader and every other thread die first). Its
 * sched_switch events then come under the dead leader's tid, whose entry
 * is final (exit_ns set): they were dropped, and its own entry was left
 * "running" to the stop, on-CPU by default, since its clock under its
 * old tid cannot be read any more. `renamed` maps the new tid back to
 * the thread's entry, so its whole life is one thread in the stream
 * under the tid it was born with (the dead leader keeps its own).
 * Included by capture.bpf.h; tree.bpf.h's exec hook fills it. */
#ifndef DETHREAD_BPF_H
#define DETHREAD_BPF_H

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);   /* the tid it has now (its leader's) */
	__type(value, __u32); /* the tid of its entry in `threads` */
} renamed SEC(".maps");

/* sched_process_exec: a thread whose tid changed, old_pid to tid. */
static __always_inline void note_dethread(__u32 tid, __u32 old_pid)
{
	if (old_pid == tid)
		return;
	__u32 *again = bpf_map_lookup_elem(&renamed, &old_pid);
	__u32 entry = again ? *again : old_pid; /* renamed twice */
	if (bpf_map_update_elem(&renamed, &tid, &entry, BPF_ANY))
		stat_add(WC_STAT_MAP_FULL, 1);
}

/* The entry of a thread seen under *tid whose own entry is final or
 * absent: the one it had before an exec took its leader's tid (and *tid
 * is then that one's), else `th` as it was. */
static __always_inline struct wc_thread *dethread_entry(struct wc_thread *th, __u32 *tid)
{
	if (th && !th->exit_ns)
		return th;
	__u32 *old = bpf_map_lookup_elem(&renamed, tid);
	if (!old)
		return th;
	struct wc_thread *o = bpf_map_lookup_elem(&threads, old);
	if (!o)
		return th;
	*tid = *old;
	return o;
}

#endif
