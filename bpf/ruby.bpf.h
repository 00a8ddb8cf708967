/* Ruby's own frames, read where a stack is taken (switch-out, sample), as
 * CPython's are (python.bpf.h): a blocked thread has moved on by the time
 * user space looks. The thread's execution context is Ruby's TLS variable
 * `ruby_current_ec` (the fiber that runs, whatever the thread): found as
 * glibc finds it, through the thread's dtv (x86_64: the TCB at fsbase
 * holds the dtv at +8; arm64: at TPIDR_EL0, +0; regs.bpf.h), a module's
 * block at dtv[modid]), so no thread
 * list is needed and a thread born a moment ago is read too. Its control
 * frames are an array from ec->cfp up to the end of its VM stack; each
 * frame's iseq and pc, or for a C method its method entry (ep[-2]), and
 * its frame flags (ep[0]) go to e->py; user space names them. The last
 * slot carries the VM stack's bounds (a thread's 1 MiB VM stack lies on its
 * machine stack: the unwinder reads past it, see capture's ruby/). */
#ifndef RUBY_BPF_H
#define RUBY_BPF_H

#include "wallclock.h"

/* Where a Ruby process keeps its execution context (filled by user space,
 * tools/capture/src/ruby/mod.rs). */
struct wc_rbcfg {
	__u64 modid;  /* libruby's TLS module id */
	__u64 dtpoff; /* ruby_current_ec's offset in libruby's TLS block */
	/* The layout of this Ruby (reader.rs's Layout): what moved between
	 * versions is given, none of it written here. */
	__u32 cfp_size;  /* sizeof(rb_control_frame_t): 64 (3.1, 3.2), 56 (3.3+) */
	__u32 ec_thread; /* ec->thread_ptr */
	__u32 th_ractor; /* th->ractor */
	__u32 th_waitq;  /* th's node linked into its ractor's GVL wait queue */
	__u32 ractor_span; /* how far into the ractor that queue's head lies */
	__u32 pad;
};

/* The marker of the last slot of e->py: it holds (vm_stack, its end). */
#define WC_RB_BOUNDS 0x52425354

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct wc_rbcfg);
} rb_cfg SEC(".maps");

/* Whether the thread of `ec` waits for its ractor's GVL: its wait-queue
 * node (3.1: th->native_thread_data; 3.2+: th->sched.node.readyq) is
 * linked into a list whose head lies in its ractor (3.1:
 * threads.gvl.waitq; 3.2+: threads.sched.readyq), not into the ubf list
 * that shares 3.1's and 3.2's node (a static of libruby's), nor unlinked (NULL, or
 * pointing at itself). The offsets are the process's Ruby's (rb_cfg). */
static __always_inline __u32 rb_gvl_waiting(__u64 ec, struct wc_rbcfg *c)
{
	__u64 th = 0, ractor = 0, p = 0, node = 0;
	__u64 span = c->ractor_span;
	if (!c->th_waitq || bpf_probe_read_user(&th, 8, (void *)(ec + c->ec_thread)) || !th)
		return 0;
	node = th + c->th_waitq;
	if (bpf_probe_read_user(&ractor, 8, (void *)(th + c->th_ractor)) || bpf_probe_read_user(&p, 8, (void *)node))
		return 0;
	for (int k = 0; k < 8; k++) {
		if (!p || p == node)
			return 0;
		if (p >= ractor && p < ractor + span)
			return 1;
		if (bpf_probe_read_user(&p, 8, (void *)p))
			return 0;
	}
	return 0;
}

/* Walk the control frames of the current task (of `pid`); fill e->py when
 * `fill`. Returns a hash of the frames (0: not a Ruby thread), mixed into
 * offcputime's stack fingerprint as Python's is. Global, verified once,
 * as py_walk. */
__noinline __u64 rb_walk(__u32 pid, __u32 dest)
{
	struct wc_rbcfg *c = bpf_map_lookup_elem(&rb_cfg, &pid);
	if (!c)
		return 0;
	struct walk_out o = walk_out(dest);
	if (o.py)
		o.py[WC_PY_MAX - 1].flags = 0;
	struct task_struct *cur = current_task();
	__u64 tp = WC_TASK_TP(cur), dtv = 0, blk = 0, ec = 0;
	if (!tp || bpf_probe_read_user(&dtv, 8, (void *)(tp + WC_TP_DTV)) || !dtv)
		return 0;
	if (bpf_probe_read_user(&blk, 8, (void *)(dtv + c->modid * 16)) || !blk || blk == ~0ULL)
		return 0;
	if (bpf_probe_read_user(&ec, 8, (void *)(blk + c->dtpoff)) || !ec)
		return 0;
	__u64 hd[3]; /* vm_stack, vm_stack_size (VALUEs), cfp */
	if (bpf_probe_read_user(hd, sizeof(hd), (void *)ec) || !hd[0] || hd[1] > (1 << 24))
		return 0;
	__u64 end = hd[0] + hd[1] * 8, f = hd[2], h = 0x5262;
	__u64 cfp_size = c->cfp_size;
	if (cfp_size < 40 || cfp_size > 128)
		return 0;
	__u32 gvl = rb_gvl_waiting(ec, c);
	h = py_mix(h, gvl);
	if (o.py) {
		o.py[WC_PY_MAX - 1].code = hd[0];
		o.py[WC_PY_MAX - 1].instr = end;
		o.py[WC_PY_MAX - 1].flags = WC_RB_BOUNDS;
		o.py[WC_PY_MAX - 1].pad = gvl;
	}
	__u32 n = 0;
	for (int i = 0; i < WC_PY_MAX - 1; i++) {
		__u64 cf[5]; /* pc, sp, iseq, self, ep */
		__u64 env[3]; /* ep[-2] method entry or cref, ep[-1], ep[0] flags */
		if (f < hd[0] || f + cfp_size > end || bpf_probe_read_user(cf, sizeof(cf), (void *)f))
			break;
		if (!cf[4] || bpf_probe_read_user(env, sizeof(env), (void *)(cf[4] - 16)))
			break;
		__u64 code = cf[2], instr = cf[2] ? cf[0] : env[0];
		h = py_mix(h, code);
		h = py_mix(h, instr);
		if (o.py) {
			o.py[i & (WC_PY_MAX - 1)].code = code;
			o.py[i & (WC_PY_MAX - 1)].instr = instr;
			o.py[i & (WC_PY_MAX - 1)].flags = env[2];
		}
		n = i + 1;
		f += cfp_size;
	}
	if (o.n)
		*o.n = n;
	return h;
}

#endif
