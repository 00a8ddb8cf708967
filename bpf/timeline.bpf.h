/* --timeline: the individual off-CPU blocks, with their times, as well as
 * their sums. One record per block at the switch-in that ends it
 * (struct wc_tl_event), into a ring buffer of its own, so a full buffer
 * loses timeline records only: the summed maps stay exact. With the flag
 * off (a const volatile) the verifier drops the whole path. */
#ifndef TIMELINE_BPF_H
#define TIMELINE_BPF_H

#include "wallclock.h"
#include "capture.bpf.h" /* percpu_add */

const volatile bool timeline_on = false;
/* Blocks shorter than this stay inside the running slice around them. */
const volatile __u64 timeline_min_ns = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096); /* sized by user space when on */
} timeline SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct wc_tl_thread);
} tl_threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WC_TL_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} tl_stats SEC(".maps");

static __always_inline void tl_stat(__u32 which, __u64 n)
{
	percpu_add(&tl_stats, which, n);
}

/* th was off-CPU from `from` to `to` in state st at fingerprint fp (the
 * one its time is summed under), waiting on th's cur_obj; w, with --wakers, the pending wake-up
 * that ended it (read, not consumed: wake_close does that after). */
static __always_inline void tl_block(struct wc_thread *th, __u32 tid, __u32 st, __u64 fp, __u64 from, __u64 to,
				     struct wc_wake *w)
{
	if (!timeline_on)
		return;
	struct wc_tl_thread *t = bpf_map_lookup_elem(&tl_threads, &tid);
	if (!t) {
		struct wc_tl_thread z = { .seg_start = th->begin_ns };
		bpf_map_update_elem(&tl_threads, &tid, &z, BPF_NOEXIST);
		t = bpf_map_lookup_elem(&tl_threads, &tid);
		if (!t) {
			tl_stat(WC_TL_MAP_FULL, 1);
			return;
		}
	}
	if (to - from < timeline_min_ns && st != WC_ST_INIT && fp != WC_FP_NEWTHREAD) {
		t->short_ns += to - from;
		t->short_cnt += 1;
		t->last_short = 1;
		return;
	}
	struct wc_tl_event *e = bpf_ringbuf_reserve(&timeline, sizeof(*e), 0);
	if (e) {
		e->seg_start = t->seg_start;
		e->off_start = from;
		e->off_end = to;
		e->fp = fp;
		e->short_ns = t->short_ns;
		e->short_cnt = t->short_cnt;
		e->back_ns = t->back_ns;
		e->pid = th->pid;
		e->tid = tid;
		e->state = st;
		e->wfp = 0;
		e->wtid = 0;
		e->wctx = 0;
		/* The block's object, as add_off keys its sum. */
		e->obj = fp < 16 ? 0 : th->cur_obj;
		e->oref = fp < 16 ? 0 : th->cur_oref;
		e->pad = 0;
		if (w && w->wfp && st != WC_ST_R) {
			e->wfp = w->wfp;
			e->wtid = w->wtid;
			e->wctx = w->wctx;
		}
		/* No wake-up: user space reads the buffer every few ms. A
		 * wake-up per record would cost the storm a context switch of
		 * the reader per switch of the target. */
		bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
		tl_stat(WC_TL_EVENTS, 1);
	} else {
		tl_stat(WC_TL_DROPS, 1);
		tl_stat(WC_TL_DROPPED_NS, to - t->seg_start);
	}
	t->seg_start = to;
	t->short_ns = 0;
	t->short_cnt = 0;
	t->back_ns = 0;
	t->last_short = 0;
}

/* The summed view gave back `ns` of th's last block to the slice after it
 * (off_taken_back): so does the timeline. That happens when th leaves the
 * CPU, so th is the current task (but for a repaired missed switch-out,
 * counted as missed_switches, where it may not be: then nothing is done). */
static __always_inline void tl_taken_back(struct wc_thread *th, __u64 ns)
{
	if (!timeline_on)
		return;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	if ((__u32)(id >> 32) != th->pid)
		return;
	struct wc_tl_thread *t = bpf_map_lookup_elem(&tl_threads, &tid);
	if (!t)
		return;
	if (!t->last_short)
		t->back_ns += ns;
	else if (t->short_ns >= ns)
		t->short_ns -= ns;
}

#endif
