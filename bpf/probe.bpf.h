/* --probe: the program's own events. One generic program per kind
 * (uprobe, uretprobe, USDT) attached once per probe, told which probe
 * it is by the attach cookie (see wallclock.h). An event probe sends its
 * firing to the probe ring buffer; a span's entry opens a level on its
 * thread's span stack and its exit closes it, sending the span with the
 * off-CPU time, by state, of the blocks the thread closed in between
 * (probe_off(), called where offcputime closes a block): every such block
 * lies wholly inside the span, since the thread runs at both ends. With
 * probes off (a const volatile) the verifier drops all of it. */
#ifndef PROBE_BPF_H
#define PROBE_BPF_H

#include "wallclock.h"
#include "capture.bpf.h"
#include <bpf/usdt.bpf.h>

const volatile bool probes_on = false;
const volatile bool spans_on = false;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096); /* sized by user space when on */
} probe_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1); /* sized by user space with spans */
	__type(key, __u32);
	__type(value, struct wc_span_stack);
} span_stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WC_PR_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} probe_stats SEC(".maps");

/* A zeroed span stack for a thread's first entry (too big for the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wc_span_stack);
} span_zero SEC(".maps");

/* The thread closed a block of d ns in state st: every span open on it
 * contains the block. */
static __always_inline void probe_off(__u32 tid, __u32 st, __u64 d)
{
	if (!spans_on)
		return;
	struct wc_span_stack *s = bpf_map_lookup_elem(&span_stacks, &tid);
	if (!s || !s->n)
		return;
	if (st > 3)
		st = 3;
	for (int i = 0; i < WC_SPAN_DEPTH; i++) {
		if (i >= s->n)
			break;
		s->lv[i].off[st & 3] += d;
	}
}

/* ctx: the program's; regs: the user registers (the stack of `stack`). */
static __always_inline void probe_fire(void *ctx, struct pt_regs *regs, __u64 cookie, __u64 *args, __u64 ret)
{
	__u64 now = bpf_ktime_get_ns();
	if (!window_open(now))
		return;
	struct task_struct *cur = (struct task_struct *)bpf_get_current_task();
	if (!is_target(cur))
		return;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	__u32 role = (cookie >> 16) & 3;
	__u64 span = cookie >> 32;
	struct wc_span_stack *s = 0;
	if (role != WC_ROLE_EVENT) {
		s = bpf_map_lookup_elem(&span_stacks, &tid);
		if (!s && role == WC_ROLE_BEGIN) {
			__u32 zero = 0;
			struct wc_span_stack *z = bpf_map_lookup_elem(&span_zero, &zero);
			if (!z)
				return;
			if (bpf_map_update_elem(&span_stacks, &tid, z, BPF_NOEXIST))
				percpu_add(&probe_stats, WC_PR_MAP_FULL, 1);
			s = bpf_map_lookup_elem(&span_stacks, &tid);
		}
		if (!s) {
			percpu_add(&probe_stats, WC_PR_UNMATCHED, 1);
			return;
		}
	}
	if (role == WC_ROLE_BEGIN) {
		__u32 n = s->n;
		if (n >= WC_SPAN_DEPTH) {
			percpu_add(&probe_stats, WC_PR_TOO_DEEP, 1);
			return;
		}
		struct wc_span_level *l = &s->lv[n & (WC_SPAN_DEPTH - 1)];
		l->start = now;
		l->span = span;
		for (int i = 0; i < 4; i++)
			l->off[i] = 0;
		for (int i = 0; i < WC_PROBE_ARGS; i++)
			l->args[i] = args[i];
		s->n = n + 1;
		return;
	}
	struct wc_probe_event *e = bpf_ringbuf_reserve(&probe_events, sizeof(*e), 0);
	if (!e) {
		percpu_add(&probe_stats, WC_PR_DROPS, 1);
		/* The level still closes: the next exit must find its own. */
	}
	if (role == WC_ROLE_END) {
		/* The innermost open level of this span; levels above it
		 * (entries whose exits were not seen: a longjmp, an
		 * exception) are closed unreported. */
		__u32 n = s->n, found = 0;
		for (int i = WC_SPAN_DEPTH - 1; i >= 0; i--) {
			if (i < n && s->lv[i].span == span) {
				found = i + 1;
				break;
			}
		}
		if (!found) {
			percpu_add(&probe_stats, WC_PR_UNMATCHED, 1);
			if (e)
				bpf_ringbuf_discard(e, 0);
			return;
		}
		struct wc_span_level *l = &s->lv[(found - 1) & (WC_SPAN_DEPTH - 1)];
		if (e) {
			e->start = l->start;
			for (int i = 0; i < 4; i++)
				e->off[i] = l->off[i];
			for (int i = 0; i < WC_PROBE_ARGS; i++)
				e->args[i] = l->args[i];
			e->depth = found - 1;
		}
		s->n = found - 1;
	} else if (e) {
		e->start = 0;
		for (int i = 0; i < 4; i++)
			e->off[i] = 0;
		for (int i = 0; i < WC_PROBE_ARGS; i++)
			e->args[i] = args[i];
		e->depth = 0;
	}
	if (!e)
		return;
	e->stack = 0;
	if ((cookie & WC_PROBE_STACK) && role == WC_ROLE_EVENT) {
		/* Unique per event: the time and the thread. The stack goes
		 * through the stack ring buffer, unwound there as any other. */
		__u64 fp = mix(now, tid) | 1;
		if (!emit_stack(ctx, cur, regs, fp, WC_KIND_PROBE, 0, now, 0))
			e->stack = fp;
	}
	e->ts = now;
	e->ret = ret;
	e->cookie = cookie;
	e->pid = id >> 32;
	e->tid = tid;
	e->role = role;
	/* No wake-up: the reader polls every 20 ms. A wake-up per record
	 * cost a switch of the reader per hit: 29 us a hit on a function
	 * called back to back (scripts/bench probes), against ~5 without. */
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	percpu_add(&probe_stats, WC_PR_EVENTS, 1);
}

SEC("uprobe")
int wc_uprobe(struct pt_regs *ctx)
{
	if (!probes_on)
		return 0;
	__u64 a[WC_PROBE_ARGS] = { PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), PT_REGS_PARM3(ctx),
				   PT_REGS_PARM4(ctx), PT_REGS_PARM5(ctx), PT_REGS_PARM6(ctx) };
	probe_fire(ctx, ctx, bpf_get_attach_cookie(ctx), a, 0);
	return 0;
}

SEC("uretprobe")
int wc_uretprobe(struct pt_regs *ctx)
{
	if (!probes_on)
		return 0;
	__u64 a[WC_PROBE_ARGS] = {};
	probe_fire(ctx, ctx, bpf_get_attach_cookie(ctx), a, PT_REGS_RC(ctx));
	return 0;
}

SEC("usdt")
int wc_usdt(struct pt_regs *ctx)
{
	if (!probes_on)
		return 0;
	__u64 a[WC_PROBE_ARGS] = {};
	int n = bpf_usdt_arg_cnt(ctx);
	for (int i = 0; i < WC_PROBE_ARGS; i++) {
		long v = 0;
		if (i < n && !bpf_usdt_arg(ctx, i, &v))
			a[i] = v;
	}
	probe_fire(ctx, ctx, bpf_usdt_cookie(ctx), a, 0);
	return 0;
}

/* raw_tp:NAME: the tracepoint's arguments as they are, read rather than
 * loaded (a load past its own argument count fails the attach; a read of
 * a few words past them only reads the kernel stack they sit on). */
SEC("raw_tp")
int wc_raw_tp(struct bpf_raw_tracepoint_args *ctx)
{
	if (!probes_on)
		return 0;
	__u64 a[WC_PROBE_ARGS] = {};
	bpf_probe_read_kernel(a, sizeof(a), (void *)ctx);
	struct task_struct *cur = current_task();
	probe_fire(ctx, task_regs(cur), bpf_get_attach_cookie(ctx), a, 0);
	return 0;
}

/* tp:CATEGORY:NAME (FIELD, ...): the tracepoint's record, its fields at
 * the offsets user space read from the event's format (tracefs), by probe
 * index. */
struct wc_tp_fields {
	__u16 off[WC_PROBE_ARGS];
	__u8 size[WC_PROBE_ARGS]; /* 0: no field */
	__u8 sign[WC_PROBE_ARGS];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct wc_tp_fields);
} tp_fields SEC(".maps");

SEC("tracepoint")
int wc_tp(void *ctx)
{
	if (!probes_on)
		return 0;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 i = cookie & 0xffff;
	struct wc_tp_fields *f = bpf_map_lookup_elem(&tp_fields, &i);
	if (!f)
		return 0;
	__u64 a[WC_PROBE_ARGS] = {};
	for (int k = 0; k < WC_PROBE_ARGS; k++) {
		__u32 sz = f->size[k];
		__u64 v = 0;
		if (sz == 0 || sz > 8)
			continue;
		bpf_probe_read_kernel(&v, sz & 15, (char *)ctx + f->off[k]);
		/* Sign-extend a signed field narrower than 64 bits. */
		if (f->sign[k] && sz < 8) {
			__u32 sh = 64 - 8 * sz;
			v = (__u64)(((__s64)(v << sh)) >> sh);
		}
		a[k] = v;
	}
	struct task_struct *cur = current_task();
	probe_fire(ctx, task_regs(cur), cookie, a, 0);
	return 0;
}

#endif
