/* CPython's own frames, read where a stack is taken (switch-out, sample):
 * a blocked thread's Python frames cannot be read later from user space,
 * it has moved on by then. User space lists the thread states of the
 * interpreters it found (py_threads: tid -> PyThreadState address) and
 * where each process's interpreter keeps its frame chain (py_cfg); here
 * the chain is walked, innermost first: code object, instruction pointer
 * and flags of each frame. User space names the code objects and puts the
 * frames where their _PyEval_EvalFrameDefault native frames were. */
#ifndef PYTHON_BPF_H
#define PYTHON_BPF_H

#include "wallclock.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} py_threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct wc_pycfg);
} py_cfg SEC(".maps");

/* One frame's first bytes, per CPU (the BPF stack has no room). Twice
 * the span read: the loop masks the span and each field's offset (see
 * py_walk), and a masked offset plus its field stays inside. */
struct py_buf {
	__u8 b[2 * WC_PY_SPAN];
};

/* Bounds the verifier of every kernel can see: 6.1's loses a bound
 * checked before the loop once the value has been spilled to the stack
 * ("R2 unbounded memory access" at the frame's read), so each use is
 * masked where it is used; the checks before the loop make the masks
 * no-ops. barrier_var keeps the compiler from dropping them. */
#define PY_SPAN_MASK (2 * WC_PY_SPAN - 1)
#define PY_OFF_MASK (WC_PY_SPAN - 1)

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_buf);
} py_buf SEC(".maps");

static __always_inline __u64 py_mix(__u64 h, __u64 v)
{
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdULL;
}

/* The thread state of `tid` (the current task): from its TLS where the
 * config says so (a thread-safe PHP: the thread's TSRM block, which the
 * executable's `_tsrm_ls_cache` holds at tls_off from the thread
 * pointer, plus the executor globals' offset in it); else listed by
 * user space, else (a thread born since its last look, whose first
 * stacks matter as much as the others) found in the interpreter's list
 * here and remembered. */
static __always_inline __u64 py_tstate(__u32 tid, struct wc_pycfg *c)
{
	if (c->tls_add) {
		struct task_struct *cur = current_task();
		__u64 tp = WC_TASK_TP(cur), ls = 0;
		if (!tp || bpf_probe_read_user(&ls, 8, (void *)(tp + c->tls_off)) || !ls)
			return 0;
		return ls + c->tls_add;
	}
	__u64 *ts = bpf_map_lookup_elem(&py_threads, &tid);
	if (ts)
		return *ts;
	__u64 interp = 0, t = 0;
	if (!c->runtime_interp || bpf_probe_read_user(&interp, sizeof(interp), (void *)c->runtime_interp) || !interp)
		return 0;
	if (bpf_probe_read_user(&t, sizeof(t), (void *)(interp + c->interp_threads)))
		return 0;
	for (int i = 0; i < WC_PY_SCAN; i++) {
		__u64 id = 0;
		if (!t || bpf_probe_read_user(&id, sizeof(id), (void *)(t + c->tstate_tid)))
			return 0;
		if (id == tid) {
			bpf_map_update_elem(&py_threads, &tid, &t, BPF_ANY);
			return t;
		}
		if (bpf_probe_read_user(&t, sizeof(t), (void *)(t + c->tstate_next)))
			return 0;
	}
	return 0;
}

/* Walk the frame chain of the current task (thread `tid` of `pid`); fill
 * e->py when e is given. Returns a hash of the frames (0: no Python thread
 * or no frame), which offcputime mixes into the stack's fingerprint: the
 * same native registers under another Python stack are another stack.
 * A global function, verified once on its own: inlined, its locals and
 * the switch-out's exceed the 512-byte stack; static, it was verified
 * again at each call (e given and not), and offcputime's switch program
 * took 0.57 s to load, most of its attach time. Its arguments are numbers
 * (5.10 refuses a global function's pointer argument): the frames go
 * where `dest` says (walkout.bpf.h; WC_WALK_NONE: the hash alone). */
__noinline __u64 py_walk(__u32 pid, __u32 tid, __u32 dest)
{
	struct walk_out o = walk_out(dest);
	bool fill = o.py != 0;
	struct wc_pycfg *c = bpf_map_lookup_elem(&py_cfg, &pid);
	if (!c)
		return 0;
	__u64 ts = py_tstate(tid, c);
	if (!ts)
		return 0;
	__u64 f = 0, h = 0x5079;
	if (bpf_probe_read_user(&f, sizeof(f), (void *)(ts + c->frame)))
		return 0;
	if (c->cframe >= 0 && f && bpf_probe_read_user(&f, sizeof(f), (void *)(f + c->cframe)))
		return 0;
	/* One read a frame, not one a field: a Python thread's every
	 * switch-out walks its chain, and each read is a fault-checked copy. */
	__u32 zero = 0, span = c->span, o_code = c->code, o_instr = c->instr, o_flags = c->flags, o_prev = c->previous;
	struct py_buf *buf = bpf_map_lookup_elem(&py_buf, &zero);
	if (!buf || span > WC_PY_SPAN || o_code > WC_PY_SPAN - 8 || o_instr > WC_PY_SPAN - 8 || o_prev > WC_PY_SPAN - 8 ||
	    o_flags > WC_PY_SPAN - 2)
		return 0;
	__u32 n = 0;
	for (int i = 0; i < WC_PY_MAX; i++) {
		barrier_var(span);
		barrier_var(o_code);
		barrier_var(o_instr);
		barrier_var(o_flags);
		barrier_var(o_prev);
		if (!f || bpf_probe_read_user(buf->b, span & PY_SPAN_MASK, (void *)f))
			break;
		__u64 code = *(__u64 *)(buf->b + (o_code & PY_OFF_MASK));
		__u64 instr = *(__u64 *)(buf->b + (o_instr & PY_OFF_MASK));
		__u16 flags = *(__u16 *)(buf->b + (o_flags & PY_OFF_MASK));
		h = py_mix(h, code);
		h = py_mix(h, instr);
		if (o.py) {
			o.py[i & (WC_PY_MAX - 1)].code = code;
			o.py[i & (WC_PY_MAX - 1)].instr = instr;
			o.py[i & (WC_PY_MAX - 1)].flags = flags;
		}
		n = i + 1;
		f = *(__u64 *)(buf->b + (o_prev & PY_OFF_MASK));
	}
	if (o.n)
		*o.n = n;
	return n ? h : 0;
}

#endif
