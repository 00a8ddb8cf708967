/* Wake-ups. Every block ends at its thread's sched_waking, stamped here
 * (the wait for a CPU after it is runnable: see switch_in).
 *
 * Wakers (offcputime --wakers): who ended each block. At sched_waking the
 * waker is whatever runs: a thread (current, whose user registers and
 * stacks are read as at a switch-out) or an interrupt (preempt_count says
 * so; current is then a bystander and only the kernel stack is the
 * waker's). The wake-up waits in `wakes` for the woken thread's switch-in,
 * where switch_in() adds the closed block to `offwake` under its waker.
 * Included by offcputime.bpf.c after its `seen`, `kscratch` and mix(). */
#ifndef WAKER_BPF_H
#define WAKER_BPF_H

const volatile bool want_wakers = false;
/* Where this CPU's preempt_count is, from this CPU's runqueue: x86 keeps
 * it in a per-CPU variable, and this kernel's kallsyms has no data symbols
 * (no CONFIG_KALLSYMS_ALL), so no __ksym can name it. Two per-CPU
 * variables of one CPU are as far apart as in the per-CPU section, which
 * BTF describes: user space sets the distance (__preempt_count's offset
 * less runqueues'); 0 when unknown (every waker is then a thread). */
const volatile __s64 preempt_from_rq = 0;

#define WC_HARDIRQ_MASK 0x000f0000
#define WC_SOFTIRQ_OFFSET 0x00000100
#define WC_NMI_MASK 0x00f00000

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct wc_wake);
} wakes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct wc_wkey);
	__type(value, struct wc_oval);
} offwake SEC(".maps");

static __always_inline __u32 wake_context(struct task_struct *cur)
{
	if (!preempt_from_rq)
		return WC_WCTX_THREAD;
	/* current runs on this CPU: its runqueue is this CPU's. */
	struct rq *rq = BPF_CORE_READ(cur, se.cfs_rq, rq);
	int pc = 0;
	if (!rq || bpf_probe_read_kernel(&pc, sizeof(pc), (void *)((__u64)rq + preempt_from_rq)))
		return WC_WCTX_THREAD;
	if (pc & WC_NMI_MASK)
		return WC_WCTX_NMI;
	if (pc & WC_HARDIRQ_MASK)
		return WC_WCTX_HARDIRQ;
	if (pc & WC_SOFTIRQ_OFFSET)
		return WC_WCTX_SOFTIRQ;
	return WC_WCTX_THREAD;
}

/* A hash of the kernel stack here: the identity of an interrupt's or a
 * kernel thread's wake-up (a walk: interrupts wake far less often than
 * threads in a switch storm). */
static __always_inline __u64 kstack_hash(void *ctx, __u64 h, int frames)
{
	__u32 zero = 0;
	struct kscratch *ks = bpf_map_lookup_elem(&kscratch, &zero);
	if (!ks)
		return h;
	long n = bpf_get_stack(ctx, ks->ips, sizeof(ks->ips), 0);
	for (int i = 0; i < WC_KSTACK_MAX; i++) {
		if (i * 8 >= n || i >= frames)
			break;
		h = mix(h, ks->ips[i]);
	}
	return h;
}

static __always_inline int on_waking(void *ctx, struct task_struct *p, bool btf)
{
	__u64 now = bpf_ktime_get_ns();
	if (!window_open(now) || !is_target_x(p, btf))
		return 0;
	__u32 tid = RD(btf, p, pid);
	/* Always (wakers or not): the block ends here; switch_in counts the
	 * rest as runnable. */
	struct wc_thread *th = bpf_map_lookup_elem(&threads, &tid);
	/* Still running for us but off the run queue: it is between its
	 * dequeue and its switch-out, which comes after this wake-up (a
	 * GIL handed over as its waiter went to sleep); it is runnable from
	 * that switch-out (see switch_out). Skipped, its wait for a CPU was
	 * counted as the block's. */
	if (th && (!th->running || !RD(btf, p, on_rq)))
		th->woken_ns = now;
	if (!want_wakers)
		return 0;
	struct wc_wake w = {};
	struct task_struct *cur = current_task();
	struct pt_regs *regs = 0;
	w.wctx = wake_context(cur);
	__u64 fp = 0x77616b65 + w.wctx; /* "wake" */
	if (w.wctx == WC_WCTX_THREAD) {
		w.wtid = RD(btf, cur, pid);
		if (w.wtid == tid)
			return 0; /* woken by itself: not yet asleep */
		/* A thread of the target knows where it last blocked: the next
		 * hop of a chain. */
		struct wc_thread *wt = bpf_map_lookup_elem(&threads, &w.wtid);
		if (wt && !wt->running)
			wt = 0; /* a missed switch-in: its block is not its last */
		/* A preemption is no wait on anyone: only a block in S or D
		 * continues a chain. */
		if (wt && (wt->cur_state == WC_ST_S || wt->cur_state == WC_ST_D)) {
			w.blk_fp = wt->cur_fp;
			w.blk_state = wt->cur_state;
		}
		if (RD(btf, cur, flags) & PF_KTHREAD) {
			fp = kstack_hash(ctx, fp, WC_KSTACK_MAX);
		} else {
			regs = task_regs(cur);
			/* Not the block's fingerprint: a waker's registers and the
			 * top of its stack hold values new at each wake (counters,
			 * times), which cost a stack copy per wake-up. The syscall
			 * instruction, the stack depth and, where bp is a frame in
			 * this stack, the return address above it, name a call site. */
			__u64 sp = reg_sp(regs, btf), bp = reg_fp(regs, btf);
			fp = mix(fp, reg_ip(regs, btf));
			fp = mix(fp, sp);
			fp = mix(fp, reg_nr(regs, btf));
			if (bp > sp && bp - sp < 16384) {
				__u64 ret = 0;
				bpf_probe_read_user(&ret, sizeof(ret), (void *)(bp + 8));
				fp = mix(fp, bp - sp);
				fp = mix(fp, ret);
			}
			/* Two callers at one stack depth reach the same syscall
			 * (main calling produce() then signal()): the return
			 * addresses into the program's own code near the top of the
			 * stack tell them apart, and nothing else there is mixed. */
			__u64 lo = BPF_CORE_READ(cur, mm, start_code), hi = BPF_CORE_READ(cur, mm, end_code);
			__u32 zero = 0;
			struct kscratch *ks = bpf_map_lookup_elem(&kscratch, &zero);
			if (ks && !bpf_probe_read_user(ks->ips, 16 * 8, (void *)sp)) {
				for (int i = 0; i < 16; i++) {
					__u64 v = ks->ips[i];
					if (v >= lo && v < hi)
						fp = mix(fp, v);
				}
			}
		}
		fp = mix(fp, w.wtid);
	} else {
		/* The interrupt's own frames: below them is whatever it
		 * interrupted. */
		fp = kstack_hash(ctx, fp, 8);
	}
	if (fp < 16)
		fp += 16;
	w.wfp = fp;
	if (!bpf_map_lookup_elem(&seen, &fp)) {
		if (!emit_stack(ctx, cur, w.wctx == WC_WCTX_THREAD ? regs : 0, fp, WC_KIND_WAKER, w.wctx, now, 1)) {
			__u8 one = 1;
			bpf_map_update_elem(&seen, &fp, &one, BPF_ANY);
		}
	}
	/* In place when the thread has an entry: an update would allocate a
	 * new element and free the old one at every wake-up. */
	struct wc_wake *old = bpf_map_lookup_elem(&wakes, &tid);
	if (old)
		*old = w;
	else
		bpf_map_update_elem(&wakes, &tid, &w, BPF_ANY);
	return 0;
}

/* tid's block (stack fp, state st, d ns) just closed at its switch-in:
 * add it under the wake-up that ended it. A switch-in with no wake-up
 * (a preempted thread) drops a stale one. */
static __always_inline void wake_close(__u32 tid, __u64 fp, __u32 st, __u64 d)
{
	struct wc_wake *w = bpf_map_lookup_elem(&wakes, &tid);
	if (!w || !w->wfp)
		return;
	if (st != WC_ST_R) {
		struct wc_wkey k = {
			.fp = fp, .wfp = w->wfp, .blk_fp = w->blk_fp, .tid = tid, .state = st,
			.wtid = w->wtid, .wctx = w->wctx, .blk_state = w->blk_state,
		};
		struct wc_oval *v = bpf_map_lookup_elem(&offwake, &k);
		if (v) {
			__sync_fetch_and_add(&v->ns, d);
			__sync_fetch_and_add(&v->count, 1);
		} else {
			struct wc_oval nv = { .ns = d, .count = 1 };
			if (bpf_map_update_elem(&offwake, &k, &nv, BPF_NOEXIST))
				stat_add(WC_STAT_MAP_FULL, 1);
		}
	}
	w->wfp = 0; /* consumed (no delete: the entry is reused) */
}

SEC("tp_btf/sched_waking")
int BPF_PROG(waking_btf, struct task_struct *p)
{
	return on_waking(ctx, p, true);
}

SEC("raw_tp/sched_waking")
int BPF_PROG(waking_raw, struct task_struct *p)
{
	return on_waking(ctx, p, false);
}

#endif
