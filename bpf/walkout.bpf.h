/* Where the runtimes' walks (py_walk, rb_walk) write the frames they read.
 * The walks are global functions, verified once each; 5.10 refuses a
 * global function's pointer argument ("Arg#2 type PTR in py_walk() is not
 * supported yet"), so instead of the event they are told, by number,
 * which of two per-CPU frame buffers to fill: the one of the event built
 * in ev_scratch (what emit_stack builds in the common case), or the one
 * of an event reserved in the ring because the scratch one was being
 * built by the program this one interrupted. fill_stack copies the
 * frames into the event. */
#ifndef WALKOUT_BPF_H
#define WALKOUT_BPF_H

enum { WC_WALK_NONE = 0, WC_WALK_SCRATCH = 1, WC_WALK_NESTED = 2 };

struct walk_frames {
	__u32 n;
	__u32 pad;
	struct wc_pyframe py[WC_PY_MAX];
};

/* Per CPU, one buffer for the event built in ev_scratch and one for an
 * event reserved in the ring by a program that interrupted that one. One
 * map for both: a walk's destination is then one kind of pointer for the
 * verifier (two maps, or the event itself beside a buffer, were states it
 * could not merge: the switch program's verification took 72 ms, not 38). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct walk_frames);
} walk_frames SEC(".maps");

struct walk_out {
	struct wc_pyframe *py; /* NULL: the walk only hashes */
	__u32 *n;
};

static __always_inline struct walk_out walk_out(__u32 dest)
{
	/* barrier_var after the null check: the compiler otherwise takes the
	 * fields' addresses before it, and the verifier refuses arithmetic on
	 * a pointer that may be NULL. */
	struct walk_out o = {};
	if (dest != WC_WALK_SCRATCH && dest != WC_WALK_NESTED)
		return o;
	__u32 key = dest - 1;
	struct walk_frames *f = bpf_map_lookup_elem(&walk_frames, &key);
	if (!f)
		return o;
	barrier_var(f);
	f->n = 0;
	o.py = f->py;
	o.n = &f->n;
	return o;
}

/* The walk's frames into its event, in one helper call (a loop of 64
 * copies weighed on the verification too). */
static __always_inline void walk_copy(struct wc_event *e, __u32 dest)
{
	__u32 key = dest - 1;
	struct walk_frames *f = bpf_map_lookup_elem(&walk_frames, &key);
	if (!f)
		return;
	e->py_n = f->n;
	bpf_probe_read_kernel(e->py, sizeof(e->py), f->py);
}

#endif
