/* Where the runtimes' walks (py_walk, rb_walk) write the frames they read.
 * The walks are global functions, verified once each; 5.10 refuses a
 * global function's pointer argument ("Arg#2 type PTR in py_walk() is not
 * supported yet"), so instead of the event they are told, by number,
 * where it is: this CPU's scratch event (what emit_stack builds in the
 * common case), or, for an event reserved in the ring because the
 * scratch one was being built by the program this one interrupted, a
 * per-CPU frame buffer that fill_stack then copies into the event. */
#ifndef WALKOUT_BPF_H
#define WALKOUT_BPF_H

enum { WC_WALK_NONE = 0, WC_WALK_SCRATCH = 1, WC_WALK_NESTED = 2 };

struct walk_frames {
	__u32 n;
	__u32 pad;
	struct wc_pyframe py[WC_PY_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct walk_frames);
} walk_nested SEC(".maps");

struct walk_out {
	struct wc_pyframe *py; /* NULL: the walk only hashes */
	__u32 *n;
};

static __always_inline struct walk_out walk_out(__u32 dest)
{
	/* barrier_var after each null check: the compiler otherwise takes
	 * the fields' addresses before it, and the verifier refuses
	 * arithmetic on a pointer that may be NULL. */
	struct walk_out o = {};
	if (dest == WC_WALK_SCRATCH) {
		__u32 cpu = bpf_get_smp_processor_id();
		struct wc_event *e = bpf_map_lookup_elem(&ev_scratch, &cpu);
		if (!e)
			return o;
		barrier_var(e);
		o.py = e->py;
		o.n = &e->py_n;
	} else if (dest == WC_WALK_NESTED) {
		__u32 zero = 0;
		struct walk_frames *f = bpf_map_lookup_elem(&walk_nested, &zero);
		if (!f)
			return o;
		barrier_var(f);
		f->n = 0;
		o.py = f->py;
		o.n = &f->n;
	}
	return o;
}

/* The nested walk's frames into its event. */
static __always_inline void walk_copy_nested(struct wc_event *e)
{
	__u32 zero = 0;
	struct walk_frames *f = bpf_map_lookup_elem(&walk_nested, &zero);
	if (!f)
		return;
	e->py_n = f->n;
	/* All of them: Ruby's last slot holds its VM stack's bounds. */
	for (int i = 0; i < WC_PY_MAX; i++)
		e->py[i] = f->py[i];
}

#endif
