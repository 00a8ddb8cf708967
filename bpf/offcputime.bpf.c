// SPDX-License-Identifier: GPL-2.0
/* Exact on/off-CPU accounting per thread from sched_switch, with off-CPU
 * time per (thread, state, stack). A stack is identified by a cheap
 * fingerprint of the user registers, the syscall number and the return
 * addresses near the top of the user stack (fingerprint.bpf.h); only a
 * fingerprint not seen before costs a stack copy (sent to user space,
 * which unwinds it with .eh_frame). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "capture.bpf.h"
#include "timeline.bpf.h"
#include "probe.bpf.h"

const volatile __u64 min_block_ns = 1000; /* a "short block" in the stats */
const volatile __u64 max_block_ns = (__u64)-1;
const volatile long state_filter = -1;
/* --check-fingerprints: copy the stack at every block, seen or not, so
 * that user space can tell whether one fingerprint ever stood for two
 * stacks (a test of fingerprint.bpf.h, costly: a copy per switch). */
const volatile bool fp_check = false;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct wc_okey);
	__type(value, struct wc_oval);
} offcpu SEC(".maps");

/* Fingerprints already sent to user space. LRU: an evicted one is merely
 * sent again. Its size is --stack-storage-size. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u8);
} seen SEC(".maps");

/* Which words were return addresses, per CPU (fingerprint.bpf.h,
 * after_call_memo): a slot is (the word, the time's second, the answer)
 * and the process's id. */
#define WC_AC_SLOTS 1024

struct kscratch {
	__u64 ips[WC_KSTACK_MAX];
	__u64 ac[WC_AC_SLOTS][2];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kscratch);
} kscratch SEC(".maps");

#include "fingerprint.bpf.h"
#include "waker.bpf.h"

static __always_inline void flush_off(__u32 tid, __u64 fp, __u32 state, __u64 obj, __u32 oref, __u64 ns, __u64 cnt,
					  struct wc_thread *th)
{
	struct wc_okey k = { .fp = fp, .tid = tid, .state = state | th->tgen << 16, .obj = obj, .oref = oref };
	struct wc_oval *v = bpf_map_lookup_elem(&offcpu, &k);
	if (v) {
		__sync_fetch_and_add(&v->ns, ns);
		__sync_fetch_and_add(&v->count, cnt);
		return;
	}
	struct wc_oval nv = { .ns = ns, .count = cnt };
	if (bpf_map_update_elem(&offcpu, &k, &nv, BPF_NOEXIST)) {
		v = bpf_map_lookup_elem(&offcpu, &k);
		if (v) {
			__sync_fetch_and_add(&v->ns, ns);
			__sync_fetch_and_add(&v->count, cnt);
		} else if (state < WC_NSTATES) {
			/* Masked where used: 6.1's verifier loses the bound
			 * checked above when the compiler reloads `state` from
			 * the stack ("R1 unbounded memory access"). */
			__u32 i = state;
			barrier_var(i);
			th->lost_ns[i & 7] += ns;
			stat_add(WC_STAT_MAP_FULL, 1);
		}
	}
}

/* A thread that blocks where it blocked last time, on the same object,
 * costs no map update: its blocks (slot 0) and the runnable time after
 * them (slot 1) are summed in th until the stack or object changes. The
 * object is the current block's (th->cur_obj, cur_oref); a synthetic
 * stack has none. */
static __always_inline void add_off(__u32 tid, __u64 fp, __u32 state, __u64 ns, struct wc_thread *th)
{
	__u32 i = state == WC_ST_R;
	__u64 obj = fp < 16 ? 0 : th->cur_obj;
	__u32 oref = fp < 16 ? 0 : th->cur_oref;
	th->pend_last = i;
	if (th->pend_cnt[i] && th->pend_fp[i] == fp && th->pend_state[i] == state && th->pend_obj[i] == obj &&
	    th->pend_oref[i] == oref) {
		th->pend_ns[i] += ns;
		th->pend_cnt[i] += 1;
		return;
	}
	if (th->pend_cnt[i])
		flush_off(tid, th->pend_fp[i], th->pend_state[i], th->pend_obj[i], th->pend_oref[i], th->pend_ns[i],
			  th->pend_cnt[i], th);
	th->pend_fp[i] = fp;
	th->pend_state[i] = state;
	th->pend_obj[i] = obj;
	th->pend_oref[i] = oref;
	th->pend_ns[i] = ns;
	th->pend_cnt[i] = 1;
}

/* st | CLOSE_TAIL: the runnable end of a block (see switch_in), no block
 * of its own for the stats. */
#define CLOSE_TAIL 0x100

/* Close th's off-CPU interval (state st, stack fp) at `now`. Every block
 * keeps its stack whatever its length: -m only counts the short ones for
 * the stats; -M and --state move what they leave out to a named synthetic
 * stack, so the thread's time still adds up. A function of its own (at
 * most five arguments, hence the flag in st): switch_in closes a block
 * and its runnable end, and two inlined copies pass the stack limit. */
static __noinline __u64 close_off(struct wc_thread *th, __u32 tid, __u32 st, __u64 fp, __u64 now)
{
	bool tail = st & CLOSE_TAIL;
	st &= 0xff;
	__u64 d = now - th->last_ts;
	if (st >= WC_NSTATES)
		return fp;
	barrier_var(st); /* the bound checked is the one the index uses */
	th->off_ns[st] += d;
	th->last_off = d;
	if (st != WC_ST_INIT && fp != WC_FP_NEWTHREAD) {
		if (d < min_block_ns && !tail) {
			th->short_ns[st] += d;
			th->short_cnt[st] += 1;
		}
		if (d > max_block_ns)
			fp = WC_FP_OVER_MAX;
		else if (state_filter >= 0 && st != state_of(state_filter))
			fp = WC_FP_STATE_FILTERED;
	}
	struct wc_wake *w = 0;
	if (want_wakers && timeline_on)
		w = bpf_map_lookup_elem(&wakes, &tid);
	tl_block(th, tid, st, fp, now - d, now, w);
	probe_off(tid, st, d);
	add_off(tid, fp, st, d, th);
	return fp; /* the stack the time went to */
}

/* A slice began before its switch-in was stamped (see close_slice): the
 * block before it, the last one added (add_off keeps it pending), was
 * that much shorter. */
static __always_inline void off_taken_back(struct wc_thread *th, __u64 ns)
{
	__u32 i = th->pend_last & 1;
	__u32 st = th->pend_state[i];
	if (!th->pend_cnt[i] || th->pend_ns[i] < ns || st >= WC_NSTATES)
		return;
	th->pend_ns[i] -= ns;
	th->off_ns[st] -= ns;
	tl_taken_back(th, ns);
}

/* prev leaves the CPU: close its on-CPU interval, note where it blocks. */
static __always_inline void switch_out(void *ctx, struct task_struct *prev, unsigned int pstate, __u64 now, bool btf)
{
	__u32 tid = RD(btf, prev, pid);
	struct wc_thread *th = dethread_entry(bpf_map_lookup_elem(&threads, &tid), &tid);
	th = thread_reborn(th, prev, now, WC_TS_SWITCH);
	if (!th) {
		th = thread_new(prev, now, WC_TS_SWITCH);
		if (!th)
			return;
	} else if (th->exit_ns) {
		return;
	} else if (!th->running) {
		__u64 began = unseen_in(th, prev, now, btf);
		close_off(th, tid, th->cur_state, th->cur_fp, began);
		th->last_ts = began;
		th->running = 1;
	}
	__u64 late = close_slice(th, prev, now, btf);
	/* A thread's life ends at its last switch: nothing follows it. */
	if (pstate & 0x80) {
		th->on_ns += late;
		late = 0;
	}
	th->last_ts = now - late;
	th->running = 0;
	/* Woken before its switch-out (see on_waking): no block, runnable
	 * from here. */
	if (th->woken_ns)
		th->woken_ns = th->last_ts;
	if (pstate & 0x80 /* TASK_DEAD */) {
		th->exit_ns = now;
		if (tid != RD(btf, prev, pid)) {
			__u32 now_tid = RD(btf, prev, pid);
			bpf_map_delete_elem(&renamed, &now_tid);
		}
		BPF_CORE_READ_STR_INTO(&th->comm, prev, comm); /* its final name */
		return;
	}
	__u32 st = state_of(pstate);
	th->cur_state = st;

	struct task_struct *cur = current_task();
	__u64 fp = 0;
	struct pt_regs *regs = 0;
	/* The object of this block: set by fd_kind (fingerprint.bpf.h). */
	th->cur_obj = 0;
	th->cur_oref = 0;
	if (!th->kthread) {
		regs = task_regs(cur);
		fp = user_fp(th, mix(reg_ip(regs, btf), reg_lr(regs, btf)), reg_sp(regs, btf), reg_fp(regs, btf), reg_nr(regs, btf));
		/* Here the walks only hash, and only in a process of their
		 * runtime (decided once: two map lookups a switch-out were a
		 * tenth of the switch program's time in a storm). */
		__u32 rt = runtimes_of(th);
		if (rt & WC_RT_PY)
			fp = mix(fp, py_walk(th->pid, tid, WC_WALK_NONE));
		if (rt & WC_RT_RB)
			fp = mix(fp, rb_walk(th->pid, WC_WALK_NONE));
		fp = mix(fp, fd_kind(th, cur, regs, reg_nr(regs, btf), btf));
	} else {
		/* Kernel threads: the kernel stack is their only identity, so
		 * they cost one walk per switch (user threads cost none). */
		__u32 zero = 0;
		struct kscratch *ks = bpf_map_lookup_elem(&kscratch, &zero);
		fp = 0x4b;
		if (ks) {
			long n = bpf_get_stack(ctx, ks->ips, sizeof(ks->ips), 2);
			for (int i = 0; i < WC_KSTACK_MAX; i++) {
				if (i * 8 >= n)
					break;
				fp = mix(fp, ks->ips[i]);
			}
		}
	}
	fp = mix(fp, st);
	fp = mix(fp, tid);
	if (th->tgen)
		fp = mix(fp, th->tgen);
	if (fp < 16)
		fp += 16;
	/* A failed copy (ring buffer full) keeps the real fingerprint for the
	 * time and is not marked seen: the next block here copies again, and
	 * only a fingerprint that never got its stack ends as [lost stack]. */
	if (fp != th->cur_fp || th->need_stack || fp_check) {
		th->need_stack = 0;
		if (fp_check || !bpf_map_lookup_elem(&seen, &fp)) {
			if (emit_stack(ctx, cur, regs, fp, 0, st, now, 2)) {
				th->need_stack = 1;
			} else {
				__u8 one = 1;
				bpf_map_update_elem(&seen, &fp, &one, BPF_ANY);
			}
		}
	}
	th->cur_fp = fp;
}

/* The stack a thread comes back from when its switch-out was not seen
 * (state unknown): its kernel stack as it is now, still the one it
 * blocked in, and its user registers. One map lookup per missed switch. */
static __always_inline __u64 unseen_stack(struct task_struct *t, __u32 tid)
{
	__u32 zero = 0;
	struct kscratch *ks = bpf_map_lookup_elem(&kscratch, &zero);
	if (!ks)
		return WC_FP_LOST;
	long n = bpf_get_task_stack(t, ks->ips, sizeof(ks->ips), 0);
	if (n <= 0)
		return WC_FP_LOST;
	__u64 fp = 0x0b5e;
	for (int i = 0; i < WC_KSTACK_MAX; i++) {
		if (i * 8 >= n)
			break;
		fp = mix(fp, ks->ips[i]);
	}
	fp = mix(fp, tid);
	if (fp < 16)
		fp += 16;
	if (!bpf_map_lookup_elem(&seen, &fp)) {
		if (emit_task_stack(t, fp, WC_ST_OTHER, false))
			return WC_FP_LOST;
		__u8 one = 1;
		bpf_map_update_elem(&seen, &fp, &one, BPF_ANY);
	}
	return fp;
}

/* next gets the CPU: close its off-CPU interval. */
static __always_inline void switch_in(struct task_struct *next, __u64 now, bool btf)
{
	__u32 tid = RD(btf, next, pid);
	struct wc_thread *th = dethread_entry(bpf_map_lookup_elem(&threads, &tid), &tid);
	th = thread_reborn(th, next, now, WC_TS_SWITCH);
	__u64 fp;
	__u32 st;
	if (!th) {
		th = thread_new(next, now, WC_TS_SWITCH);
		if (!th)
			return;
		/* Born during the capture: waiting for its first run. Else it was
		 * off-CPU since before the start. */
		if (th->begin_ns > start_ns) {
			st = WC_ST_R;
			fp = WC_FP_NEWTHREAD;
		} else if (snap_stacks && btf) {
			/* System-wide, switched in before the task iterator came
			 * to it (a few ms of a busy machine's threads): nothing
			 * will read its stack at the start, but its kernel stack
			 * and registers are still those it waited in. Its state
			 * then is unknown. It was [lost stack]. */
			st = WC_ST_OTHER;
			fp = unseen_stack(next, tid);
		} else {
			st = WC_ST_INIT;
			fp = WC_FP_INIT;
		}
	} else {
		if (th->exit_ns)
			return;
		if (th->running) {
			if (!unseen_out(th, next, now, btf))
				return;
			th->cur_state = WC_ST_OTHER;
			th->cur_fp = btf ? unseen_stack(next, tid) : WC_FP_LOST;
			th->cur_obj = 0;
			th->cur_oref = 0;
		}
		st = th->cur_state;
		fp = th->cur_fp;
	}
	/* A block ends when the thread is woken (sched_waking stamped it),
	 * not when it runs: the time it then waits for a CPU is runnable,
	 * under the same stack (so a thread woken from a lock and kept off
	 * the CPU shows that wait as [runnable], not as the lock's). Only the
	 * block is its waker's. */
	__u64 d = now - th->last_ts, q = 0;
	if ((st == WC_ST_S || st == WC_ST_D || st == WC_ST_OTHER) && th->woken_ns >= th->last_ts && th->woken_ns < now)
		q = now - th->woken_ns;
	th->woken_ns = 0;
	__u64 blk_fp = fp;
	fp = close_off(th, tid, st, fp, now - q);
	if (want_wakers)
		wake_close(tid, fp, st, d - q);
	if (q) {
		th->last_ts = now - q;
		close_off(th, tid, WC_ST_R | CLOSE_TAIL, blk_fp, now);
	}
	th->last_ts = now;
	th->running = 1;
	open_slice(th, next, btf);
}

static __always_inline int handle(void *ctx, bool preempt, struct task_struct *prev, struct task_struct *next,
				  unsigned int pstate, bool btf)
{
	__u64 now = bpf_ktime_get_ns();
	if (!window_open(now))
		return 0;
	bool p = is_target_x(prev, btf), n = is_target_x(next, btf);
	if (!p && !n)
		return 0;
	stat_add(WC_STAT_SWITCHES, 1);
	/* prev_state is the state prev had when __schedule began; a task
	 * preempted (an involuntary switch) between setting a sleeping state
	 * and calling schedule() stays on the run queue: it is runnable, and
	 * no wake-up ends that wait. Read as S, its time waiting for the CPU
	 * went under [sleep] until it ran. */
	if (preempt)
		pstate = 0;
	if (p)
		switch_out(ctx, prev, pstate, now, btf);
	if (n)
		switch_in(next, now, btf);
	return 0;
}

SEC("tp_btf/sched_switch")
int switch_btf(__u64 *ctx)
{
	struct task_struct *prev = (void *)ctx[1], *next = (void *)ctx[2];
	return handle(ctx, (bool)ctx[0], prev, next, switch_prev_state(ctx, prev), true);
}

SEC("raw_tp/sched_switch")
int switch_raw(__u64 *ctx)
{
	struct task_struct *prev = (void *)ctx[1], *next = (void *)ctx[2];
	return handle(ctx, (bool)ctx[0], prev, next, switch_prev_state(ctx, prev), false);
}

char LICENSE[] SEC("license") = "GPL";
