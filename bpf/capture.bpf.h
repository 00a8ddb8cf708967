/* BPF-only helpers shared by offcputime and oncputime: target filtering
 * (pids, process trees, a cgroup), thread bookkeeping and the stack event
 * sent to user space. */
#ifndef CAPTURE_BPF_H
#define CAPTURE_BPF_H

#include "wallclock.h"
#include "compat.bpf.h"

/* One stack event per CPU, built there and sent at the size its copy used
 * (see emit_stack); its entries are set at load (one per CPU). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wc_event);
} ev_scratch SEC(".maps");

#include "ustack.bpf.h"
#include "walkout.bpf.h"
#include "python.bpf.h"
#include "ruby.bpf.h"

/* Whether a thread's process runs a runtime whose frames BPF reads is
 * decided once (wc_thread.rt_kinds), not looked up in py_cfg and rb_cfg
 * at each switch-out: user space adds one to rt_gen's entry after it
 * adds a process to either map, and a thread decides again when the
 * number it decided at is not the current one. */
enum { WC_RT_PY = 1, WC_RT_RB = 2 };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} rt_gen SEC(".maps");

static __always_inline __u32 runtimes_of(struct wc_thread *th)
{
	__u32 zero = 0;
	__u32 *g = bpf_map_lookup_elem(&rt_gen, &zero);
	__u32 now = (g ? *g : 0) + 1; /* 0: a new record, not decided */
	if (th->rt_gen == now)
		return th->rt_kinds;
	__u32 pid = th->pid, k = 0;
	if (bpf_map_lookup_elem(&py_cfg, &pid))
		k |= WC_RT_PY;
	if (bpf_map_lookup_elem(&rb_cfg, &pid))
		k |= WC_RT_RB;
	th->rt_kinds = k;
	th->rt_gen = now;
	return k;
}

#define PF_KTHREAD 0x00200000

const volatile bool filter_tgid = false;
const volatile bool filter_tid = false;
const volatile int thread_kind = 0;  /* 0 all, 1 user threads, 2 kernel threads */
const volatile bool want_ustack = true;
const volatile bool want_kstack = true;
/* The common case of one target process: a compare instead of a lookup. */
const volatile __u32 single_tgid = 0;
/* Process trees (tree.bpf.h): new processes of a traced one join `tgids`;
 * tree_grown says the map now holds more than single_tgid. */
const volatile bool follow_children = false;
volatile __u32 tree_grown = 0;
/* --cgroup: tasks whose default-hierarchy (v2) cgroup is cgroup_id or
 * below it; cgroup_level is its depth (ancestors[cgroup_level]). */
const volatile bool filter_cgroup = false;
const volatile __u64 cgroup_id = 0;
const volatile __u32 cgroup_level = 0;

/* Written by user space once attached, then at the stop: events outside
 * [start_ns, end_ns) are ignored. */
volatile __u64 start_ns = 0;
volatile __u64 end_ns = 0;

/* A process held by a wrapper until it execs its command (`-- COMMAND`,
 * --from-exec): not a target before then, so that the wrapper's gate is
 * not the command's time. Its exec (tree.bpf.h) begins its accounting,
 * clears held_tgid and stamps exec_ns, which user space then takes as the
 * start of the capture's window. */
volatile __u32 held_tgid = 0;
volatile __u64 exec_ns = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} tgids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} tids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct wc_thread);
} threads SEC(".maps");

/* The final entries of threads whose tid a new thread took before user
 * space moved them out of `threads` (it does once a second): see
 * thread_reborn. Key: WC_REBORN_KEY. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct wc_thread);
} reborn SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* 256 events of a 64K stack copy */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WC_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/* Add n to entry `which` of a per-CPU array of counters (this CPU's). */
static __always_inline void percpu_add(void *map, __u32 which, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(map, &which);
	if (v)
		*v += n;
}

static __always_inline void stat_add(__u32 which, __u64 n)
{
	percpu_add(&stats, which, n);
}

/* A thread's state as it leaves the CPU (task_struct.__state). */
static __always_inline __u32 state_of(unsigned int s)
{
	if (s == 0)
		return WC_ST_R;            /* TASK_RUNNING: preempted */
	if (s & 0x0001)
		return WC_ST_S;            /* TASK_INTERRUPTIBLE */
	if (s & 0x0400)
		return WC_ST_OTHER;        /* TASK_IDLE (D without load): idle kernel threads, not I/O */
	if (s & 0x0002)
		return WC_ST_D;            /* TASK_UNINTERRUPTIBLE */
	return WC_ST_OTHER;
}

static __always_inline __u64 mix(__u64 h, __u64 v)
{
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdULL;
}

static __always_inline bool window_open(__u64 now)
{
	__u64 s = start_ns, e = end_ns;
	return s && now >= s && (!e || now < e);
}

/* Whether t's v2 cgroup is the target cgroup or one below it: its
 * ancestor at the target's level is the target (a move into the cgroup is
 * seen at the task's next switch). */
static __always_inline bool in_cgroup(struct task_struct *t)
{
	struct cgroup *c = BPF_CORE_READ(t, cgroups, dfl_cgrp);
	if (!c || BPF_CORE_READ(c, level) < (int)cgroup_level)
		return false;
	struct cgroup *a = NULL;
	if (bpf_core_read(&a, sizeof(a), &c->ancestors[cgroup_level]) || !a)
		return false;
	return BPF_CORE_READ(a, kn, id) == cgroup_id;
}

/* tp_btf hands trusted task pointers: read fields directly (a load instead
 * of a helper call); raw_tp needs the probe read. `btf` is a constant at
 * every call site, so the compiler keeps only one branch. */
#define RD(btf, p, f) ((btf) ? (p)->f : BPF_CORE_READ(p, f))

static __always_inline bool is_target_x(struct task_struct *t, bool btf)
{
	__u32 tgid = RD(btf, t, tgid);
	__u32 tid = RD(btf, t, pid);
	if (!tid)
		return false; /* idle */
	if (tgid == held_tgid)
		return false; /* before its exec */
	if (thread_kind) {
		bool k = RD(btf, t, flags) & PF_KTHREAD;
		if ((thread_kind == 1) == k)
			return false;
	}
	if (single_tgid) {
		/* The target itself costs one compare, as without children. */
		if (tgid != single_tgid &&
		    !(follow_children && tree_grown && bpf_map_lookup_elem(&tgids, &tgid)))
			return false;
	} else if (filter_tgid && !bpf_map_lookup_elem(&tgids, &tgid)) {
		return false;
	}
	if (filter_tid && !bpf_map_lookup_elem(&tids, &tid))
		return false;
	if (filter_cgroup && !in_cgroup(t))
		return false;
	return true;
}

static __always_inline bool is_target(struct task_struct *t)
{
	return is_target_x(t, false);
}

/* A new thread entry is built in a per-CPU scratch record, not on the
 * BPF stack: the record is 400-odd bytes, and kernels before 6.13 (no
 * private stack for tracing programs) refuse a call chain whose frames
 * sum past 512 bytes (6.12: "combined stack size of 3 calls is 672").
 * One slot per context that can build one, so that a program which
 * interrupts another on its CPU (a perf sample in the middle of an exec's
 * tracepoint) never writes into the record the other is building; the
 * sched_switch programs run with interrupts off, the iterator alone. */
enum { WC_TS_SWITCH, WC_TS_SAMPLE, WC_TS_EXEC, WC_TS_SNAP, WC_TS_N };

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WC_TS_N);
	__type(key, __u32);
	__type(value, struct wc_thread);
} th_scratch SEC(".maps");

/* This CPU's scratch record of `slot`, zeroed; NULL only if the map
 * lookup fails (it does not: the array is preallocated). */
static __always_inline struct wc_thread *th_zeroed(__u32 slot)
{
	struct wc_thread *z = bpf_map_lookup_elem(&th_scratch, &slot);
	if (z)
		__builtin_memset(z, 0, sizeof(*z));
	return z;
}

/* The entry of a thread seen for the first time: accounting begins at the
 * capture start, or at the thread's birth when it was born later. A
 * function of its own: the fingerprint's calls (fingerprint.bpf.h) and
 * this one's did not fit in 512 bytes together. `slot`: the caller's
 * context (WC_TS_*). */
static __noinline struct wc_thread *thread_new(struct task_struct *t, __u64 now, __u32 slot)
{
	struct wc_thread *z = th_zeroed(slot);
	if (!z)
		return NULL;
	__u32 tid = BPF_CORE_READ(t, pid);
	__u64 born = BPF_CORE_READ(t, start_time);
	z->pid = BPF_CORE_READ(t, tgid);
	z->begin_ns = born > start_ns ? born : start_ns;
	/* A process may enter a cgroup long after its birth (moved there,
	 * then exec'd: a container or a service starting): one born during
	 * the capture is counted from when it is first seen in it. */
	if (filter_cgroup && born > start_ns)
		z->begin_ns = now;
	if (z->begin_ns > now)
		z->begin_ns = now;
	z->last_ts = z->begin_ns;
	z->kthread = (BPF_CORE_READ(t, flags) & PF_KTHREAD) != 0;
	BPF_CORE_READ_STR_INTO(&z->comm, t, comm);
	if (bpf_map_update_elem(&threads, &tid, z, BPF_NOEXIST) && bpf_map_lookup_elem(&threads, &tid) == NULL) {
		stat_add(WC_STAT_MAP_FULL, 1);
		return NULL;
	}
	return bpf_map_lookup_elem(&threads, &tid);
}

/* th, the entry of `t`'s tid, is final (its thread exited), and `t` was
 * born after that exit: the tid was used again, by a new thread of a new
 * process (a pid reused) or of the same one, before user space moved the
 * entry out. The final entry goes to `reborn` for user space, and `t`
 * gets a fresh one, one tgen later. Returns NULL then: the caller makes
 * or finds the new entry as for any new thread (thread_new). Else th. */
static __noinline struct wc_thread *thread_reborn(struct wc_thread *th, struct task_struct *t, __u64 now, __u32 slot)
{
	if (!th || !th->exit_ns || BPF_CORE_READ(t, start_time) <= th->exit_ns)
		return th;
	__u32 tid = BPF_CORE_READ(t, pid);
	__u32 tgen = th->tgen;
	__u64 key = WC_REBORN_KEY(tid, tgen);
	if (bpf_map_update_elem(&reborn, &key, th, BPF_NOEXIST)) {
		/* Full: the new thread waits, dropped, as before (counted). */
		stat_add(WC_STAT_MAP_FULL, 1);
		return th;
	}
	bpf_map_delete_elem(&threads, &tid);
	struct wc_thread *n = thread_new(t, now, slot);
	if (n)
		n->tgen = (tgen + 1) & 0x3ff;
	return NULL;
}

/* A thread leaves the CPU at `now` after running since th->last_ts: the
 * slice is on-CPU, and the part of it the task's CPU clock did not count
 * is steal (see struct wc_thread). se.sum_exec_runtime is current here:
 * __schedule updated it just before this tracepoint.
 *
 * The clock can say the thread ran longer than the wall time between our
 * stamps: the kernel starts a task's clock when it picks the task, and our
 * stamp at that switch-in comes later by whatever ran on the tracepoint
 * before us (another tracer's program that copied a stack: microseconds
 * per switch). Slice by slice the two clocks also differ both ways by a
 * little (interrupt time is steal; a wake-up preemption starts the woken
 * task's clock at the wake-up), so only when the clock gets ahead of the
 * wall summed over all slices is a slice widened, back into the off-CPU
 * interval before it (at most that interval), and off_taken_back() takes
 * that time from wherever the tool counted the interval. Without this, a
 * thread of short slices (a server's, waking every 150 us) lost a sixth
 * of its CPU time to a second tracer on the same tracepoint.
 *
 * The other way, a slice longer than its clock and the steal of its CPU
 * (rq->clock less rq->clock_task: the interrupt and paravirt steal time
 * the kernel kept out of every task's clock) ended, for the kernel,
 * before our stamp: at a wake-up preemption the scheduler skips its clock
 * update and stops the preempted task's clock at the wake-up (the woken
 * task's starts there), or the switch-out of a thread that blocks comes
 * after a new-idle balance. That much (`late`, returned) is the start of
 * the off-CPU interval that follows: the caller stamps the switch-out
 * there. Counted as steal, it was the same time twice (in the woken
 * task's clock and in this one's steal): two CPU hogs claimed 7.7 ms of
 * steal each in 0.84 s while the kernel's steal was 0.03 ms, and summed
 * over a machine's threads the claim was more than its steal. */
static __always_inline void off_taken_back(struct wc_thread *th, __u64 ns); /* per tool */

/* t's runqueue (its CPU's: t is switching there) and that runqueue's two
 * clocks, with plain loads where the program has BTF pointers: read with
 * the helper, the four reads of a switch-in and the four of a switch-out
 * were a third of the switch program's time in a storm. */
static __always_inline struct rq *task_rq(struct task_struct *t, bool btf)
{
	if (btf)
		return t->se.cfs_rq->rq;
	return BPF_CORE_READ(t, se.cfs_rq, rq);
}

static __always_inline __u64 close_slice(struct wc_thread *th, struct task_struct *t, __u64 now, bool btf)
{
	__u64 wall = now - th->last_ts;
	__u64 exec = RD(btf, t, se.sum_exec_runtime);
	__u64 early = 0, late = 0;
	if (th->exec_known) {
		__u64 ran = exec - th->exec_base;
		struct rq *rq = task_rq(t, btf);
		if (rq && th->kclock_base) {
			__u64 clock = RD(btf, rq, clock), task = RD(btf, rq, clock_task);
			__u64 ks = clock - task > th->rq_base ? clock - task - th->rq_base : 0;
			th->slice_steal_ns += ks;
			th->slice_kwall_ns += clock - th->kclock_base;
			/* Past its clock and its CPU's steal, the slice's end
			 * is the kernel's, not ours (see above): off-CPU. */
			if (wall > ran + ks) {
				late = wall - ran - ks;
				wall -= late;
			}
		}
		th->slice_wall_ns += wall;
		th->slice_exec_ns += ran;
		if (th->slice_exec_ns > th->slice_wall_ns) {
			early = th->slice_exec_ns - th->slice_wall_ns;
			if (early > th->last_off)
				early = th->last_off;
			wall += early;
			th->slice_wall_ns += early;
		}
	} else if (!th->first_out) {
		th->first_out = now;
		th->first_exec = exec;
	}
	th->on_ns += wall;
	if (early) {
		th->last_off -= early;
		off_taken_back(th, early);
	}
	th->exec_known = 0;
	th->out_exec = exec;
	return late;
}

/* A switch-out of a thread we saw leave and never come back: its switch-in
 * was not seen (it happens, rarely, under load). Its CPU clock says how long
 * it ran since it left: that much before `now` was on-CPU. Returns when
 * that unseen slice began (the caller closes the off-CPU interval there). */
static __always_inline __u64 unseen_in(struct wc_thread *th, struct task_struct *t, __u64 now, bool btf)
{
	__u64 exec = RD(btf, t, se.sum_exec_runtime);
	__u64 ran = exec > th->out_exec ? exec - th->out_exec : 0;
	if (ran > now - th->last_ts)
		ran = now - th->last_ts;
	stat_add(WC_STAT_MISSED, 1);
	th->exec_base = exec - ran;
	th->exec_known = 1;
	th->kclock_base = 0;
	return now - ran;
}

/* A switch-in of a thread we think is running: its switch-out was not seen.
 * Its clock says how long it ran after its last switch-in: that slice is
 * closed; the rest, up to `now`, was off-CPU (state and stack unknown).
 * Returns false when there is no clock base to tell. */
static __always_inline bool unseen_out(struct wc_thread *th, struct task_struct *t, __u64 now, bool btf)
{
	stat_add(WC_STAT_MISSED, 1);
	if (!th->exec_known)
		return false;
	__u64 exec = RD(btf, t, se.sum_exec_runtime);
	__u64 ran = exec > th->exec_base ? exec - th->exec_base : 0;
	if (ran > now - th->last_ts)
		ran = now - th->last_ts;
	th->kclock_base = 0; /* the slice ended on a CPU not known */
	(void)close_slice(th, t, th->last_ts + ran, btf);
	th->last_ts += ran;
	th->running = 0;
	return true;
}

/* A thread gets the CPU: its CPU clock now is the base of the slice. */
static __always_inline void open_slice(struct wc_thread *th, struct task_struct *t, bool btf)
{
	th->exec_base = RD(btf, t, se.sum_exec_runtime);
	th->exec_known = 1;
	struct rq *rq = task_rq(t, btf);
	th->kclock_base = 0;
	if (rq) {
		__u64 clock = RD(btf, rq, clock);
		th->rq_base = clock - RD(btf, rq, clock_task);
		th->kclock_base = clock;
	}
}

/* A stack event is sent with only WC_USTACK_TIGHT bytes of its user-stack
 * copy when the ring buffer is more than half full, WC_USTACK_TIGHTER when
 * more than three quarters (the leaf and a few callers): a burst of new stacks
 * (a browser starting: a few thousand in half a second) while the
 * consumer waits for a CPU on a loaded machine. Dropped, they were
 * [lost stack] for every thread that blocked once there and exited (most
 * of a browser's). A stack cut short ends in [truncated] where its copy
 * ends. Every stack event is built in ev_scratch and sent at the size
 * its copy used (see emit_stack), one entry per CPU (set at load): the
 * programs that send
 * stacks run with interrupts off (sched_switch, sched_waking) or in the
 * timer interrupt (oncputime's samples), so none interrupts another on
 * its CPU while it builds one. */
#define WC_USTACK_TIGHT 16384
#define WC_USTACK_TIGHTER 4096

/* ev_scratch: see emit_stack (defined before the runtimes' walks, which
 * write their frames into it). */

/* How much of a user-stack copy the ring buffer has room for: all of it
 * (WC_USTACK_MAX) when it is at most half full. */
static __always_inline __u32 ring_room(void)
{
	__u64 used = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	__u64 size = bpf_ringbuf_query(&events, BPF_RB_RING_SIZE);
	if (used * 4 > size * 3)
		return WC_USTACK_TIGHTER;
	if (used * 2 > size)
		return WC_USTACK_TIGHT;
	return WC_USTACK_MAX;
}

/* Fill a stack event for `current` (skipping `how & 0xff` kernel frames: the
 * BPF dispatch above __schedule in a tracepoint): kernel stack, user
 * registers and a copy of the user stack (WC_USTACK_MAX, 64K, read page by
 * page when the one read fails: ustack.bpf.h). A
 * function of its own, called for a reserved event or a scratch one. */
static __noinline int fill_stack(void *ctx, struct task_struct *cur, struct pt_regs *regs, struct wc_event *e, __u32 how)
{
	if (!e)
		return 0;
	e->ip = e->sp = e->bp = e->lr = 0;
	e->kstack_bytes = 0;
	e->ustack_bytes = 0;
	e->py_n = 0;
	BPF_CORE_READ_STR_INTO(&e->comm, cur, comm);
	if (want_kstack) {
		long n = bpf_get_stack(ctx, e->kstack, sizeof(e->kstack), how & BPF_F_SKIP_FIELD_MASK);
		e->kstack_bytes = n > 0 ? n : 0;
	}
	if (want_ustack && regs && !(BPF_CORE_READ(cur, flags) & PF_KTHREAD)) {
		__u64 sp = reg_sp(regs, false);
		e->ip = reg_ip(regs, false);
		e->sp = sp;
		e->bp = reg_fp(regs, false);
		e->lr = reg_lr(regs, false);
		/* 64K, or, page by page, all that is left up to the end of
		 * the stack's mapping: a thread within 64K of its stack's top
		 * (a shallow one, or its outermost frames) keeps every frame.
		 * Halving instead lost up to half of it: the unwind stopped
		 * short of clone3 in 6% of a Python thread's samples. */
		e->ustack_bytes = ustack_copy_current(e->ustack, WC_USTACK_MAX, sp);
		if (!e->ustack_bytes)
			stat_add(WC_STAT_USTACK_FAULTS, 1);
		/* The walks write a per-CPU frame buffer, copied into the
		 * event: walkout.bpf.h. */
		__u32 dest = how >> 16;
		py_walk(e->pid, e->tid, dest);
		rb_walk(e->pid, dest);
		walk_copy(e, dest);
	}
	return 0;
}

/* An event's header and stacks, whether it goes to the ring buffer
 * directly or through the per-CPU scratch copy. */
static __always_inline void fill_event(void *ctx, struct task_struct *cur, struct pt_regs *regs,
				       struct wc_event *e, __u64 fp, __u32 kind, __u32 state,
				       __u64 now, __u32 kskip, __u32 dest)
{
	e->fp = fp;
	e->ts = now;
	e->pid = BPF_CORE_READ(cur, tgid);
	e->tid = BPF_CORE_READ(cur, pid);
	e->kind = kind;
	e->state = state;
	fill_stack(ctx, cur, regs, e, kskip | dest << 16);
}

/* Whether this CPU's scratch event is being built: a program in process
 * context (a uprobe's, --probe) can be interrupted by one that sends a
 * stack from an interrupt (sched_waking's, --wakers); the one inside
 * then reserves its event in the ring instead. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} ev_busy SEC(".maps");

/* Fill and send a stack event for `current` (see fill_stack): 0, or -1
 * when the ring buffer had no room (counted). Built in the per-CPU
 * scratch event and sent at the size the copy used: a reservation takes
 * the whole struct (64K and more) of ring whatever the copy used, and a
 * loaded machine's burst of new stacks (mostly threads preempted at a new
 * ip, a few K of stack each) filled a 16 MiB ring with a few hundred,
 * then had them cut short, then lost. One more memcpy per new stack. */
static __always_inline int emit_stack(void *ctx, struct task_struct *cur, struct pt_regs *regs,
				      __u64 fp, __u32 kind, __u32 state, __u64 now, __u32 kskip)
{
	__u32 room = ring_room();
	__u32 zero = 0;
	__u32 *busy = bpf_map_lookup_elem(&ev_busy, &zero);
	struct wc_event *e;
	if (!busy || *busy) {
		e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
		if (!e)
			goto drop;
		fill_event(ctx, cur, regs, e, fp, kind, state, now, kskip, WC_WALK_NESTED);
		bpf_ringbuf_submit(e, 0);
		stat_add(WC_STAT_NEW_STACKS, 1);
		return 0;
	}
	__u32 cpu = bpf_get_smp_processor_id();
	e = bpf_map_lookup_elem(&ev_scratch, &cpu);
	if (!e)
		goto drop;
	*busy = 1;
	fill_event(ctx, cur, regs, e, fp, kind, state, now, kskip, WC_WALK_SCRATCH);
	__u32 n = e->ustack_bytes;
	if (n > WC_USTACK_MAX)
		n = WC_USTACK_MAX; /* a bound the verifier sees */
	if (n > room) {
		n = room;
		e->ustack_bytes = n;
		stat_add(WC_STAT_USTACK_CUT, 1);
	}
	long err = bpf_ringbuf_output(&events, e, offsetof(struct wc_event, ustack) + n, 0);
	*busy = 0;
	if (err)
		goto drop;
	stat_add(WC_STAT_NEW_STACKS, 1);
	return 0;
drop:
	stat_add(WC_STAT_RINGBUF_DROPS, 1);
	return -1;
}

#include "dethread.bpf.h"
#include "tree.bpf.h"
#include "snapshot.bpf.h"

#endif
