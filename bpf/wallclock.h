/* Types and limits shared by the BPF programs and the Rust side: the Rust
 * types are generated from this file by bindgen (tools/capture/build.rs),
 * with a compile-time check of every field's offset; never copy them. */
#ifndef WALLCLOCK_H
#define WALLCLOCK_H

#define WC_COMM_LEN 16
#define WC_KSTACK_MAX 127
/* User stack copied per stack event, from sp. 64K: OpenBLAS's
 * dgemm_thread_nn and inner_thread have 12K frames each, and with numpy's
 * and a Python thread's frames under them a 16K copy ended short of the
 * interpreter in most of a matmul thread's samples (README, "Runtimes"). */
#define WC_USTACK_MAX 65536
#define WC_NSTATES 5
#define WC_PY_MAX 64 /* Python frames read per stack (python.bpf.h) */
#define WC_PY_SCAN 64 /* thread states looked through for a new thread */
#define WC_PY_SPAN 128 /* bytes of a Python frame read (python.bpf.h) */

/* Off-CPU states. WC_ST_INIT: already off-CPU when the capture began (the
 * Rust side replaces it with the state and stack read from /proc). */
enum wc_state { WC_ST_R = 0, WC_ST_S = 1, WC_ST_D = 2, WC_ST_OTHER = 3, WC_ST_INIT = 4 };

/* Fingerprints below 16 are synthetic stacks. */
#define WC_FP_LOST 1   /* no stack to read: a switch-out the tracer never saw */
#define WC_FP_INIT 2   /* blocked since before the capture */
#define WC_FP_NEWTHREAD 3 /* new thread waiting for its first run */
#define WC_FP_OVER_MAX 4  /* a block longer than -M (a filter the user asked for) */
#define WC_FP_STATE_FILTERED 5 /* a block in a state --state leaves out */

enum wc_stat {
	WC_STAT_SWITCHES = 0,
	WC_STAT_NEW_STACKS,
	WC_STAT_RINGBUF_DROPS,
	WC_STAT_MAP_FULL,
	WC_STAT_USTACK_FAULTS,
	WC_STAT_SAMPLES,
	WC_STAT_OVER_MAX, /* unused: offcputime counts the [filtered: ...] blocks */
	WC_STAT_MISSED, /* a switch-in or -out not seen, repaired from the CPU clock */
	WC_STAT_USTACK_CUT, /* a user-stack copy sent cut short: the ring buffer was filling */
	WC_STAT_MAX,
};

/* Per-thread exact accounting. last_ts is the last switch-in while running,
 * the last switch-out while off-CPU. */
struct wc_thread {
	__u64 last_ts;
	__u64 begin_ns;
	__u64 exit_ns;
	__u64 on_ns;
	__u64 off_ns[WC_NSTATES];
	/* Blocks under -m, counted for the stats only: their time stays under
	 * their stacks like any other block's. */
	__u64 short_ns[WC_NSTATES];
	__u64 short_cnt[WC_NSTATES];
	__u64 lost_ns[WC_NSTATES];  /* the offcpu map was full */
	__u64 cur_fp;
	__u64 samples;
	/* Steal: the part of on_ns the task's own CPU clock
	 * (se.sum_exec_runtime) did not count, i.e. time the hypervisor ran
	 * something else on its vCPU. exec_base is that clock at the last
	 * switch-in (valid when exec_known); slice_wall_ns and slice_exec_ns
	 * sum wall and clock over the slices measured so (steal is their
	 * difference, taken at the end; the wall sum never falls behind the
	 * clock sum, nor passes it by more than slice_steal_ns: see
	 * close_slice). A thread already running at the start
	 * has no base for its first slice: first_out and first_exec (time and
	 * clock at its end) let user space measure it from the /proc snapshot
	 * taken at the start. */
	__u64 exec_base;
	__u64 slice_wall_ns;
	__u64 slice_exec_ns;
	/* The steal the kernel itself took from the task's clock in the
	 * slices measured so: its CPU's rq->clock less rq->clock_task (both
	 * as of __schedule's update) moves by the interrupt and paravirt
	 * steal time of that CPU. rq_base: that difference at the switch-in;
	 * kclock_base: rq->clock then (slice_kwall_ns: the slices' wall time
	 * on the kernel's clock). */
	__u64 rq_base;
	__u64 kclock_base;
	__u64 slice_steal_ns;
	__u64 slice_kwall_ns;
	__u64 first_out;
	__u64 first_exec;
	__u64 out_exec;  /* the clock at the last switch-out */
	/* When the thread was last woken (sched_waking): its block ended
	 * there, and the rest until its switch-in is runnable. */
	__u64 woken_ns;
	/* The off-CPU interval that ended at the last switch-in: a slice whose
	 * clock ran longer than its wall time began earlier than that
	 * switch-in was stamped (see close_slice), and takes the difference
	 * back from it. */
	__u64 last_off;
	/* Blocks at the same stack as the previous one are summed here and
	 * written to the offcpu map only when the stack changes: slot 0 the
	 * blocks, slot 1 the runnable time that ends them (a woken thread
	 * waiting for a CPU, kept apart: see switch_in), so a thread that
	 * blocks and wakes at the same place costs no map update either way.
	 * pend_last: the slot added to last. */
	__u64 pend_fp[2];
	__u64 pend_ns[2];
	__u64 pend_cnt[2];
	__u32 pend_state[2];
	__u32 pend_last;
	/* What the current block waits on (struct wc_okey's obj and oref),
	 * and the pending blocks' (slot as pend_fp). */
	__u32 cur_oref;
	__u32 pend_oref[2];
	__u64 cur_obj;
	__u64 pend_obj[2];
	__u32 exec_known;
	__u32 pid;
	__u32 cur_state;
	__u32 running;
	__u32 kthread;
	/* The stack copy of cur_fp failed (ring buffer full): the next
	 * switch-out there tries again, even at the same fingerprint. */
	__u32 need_stack;
	/* The task iterator at the start visited it (snapshot.bpf.h): a
	 * thread alive then that it did not visit is hidden from BPF. */
	__u32 snapped;
	/* How many earlier threads of this tid the capture saw end while
	 * their entries were still here (see thread_reborn): 0 but for a tid
	 * used again within a second. Keys its blocks (wc_okey) and mixed
	 * into its fingerprints, so the two threads stay apart. */
	__u32 tgen;
	/* Which runtimes' walks a switch-out hashes (WC_RT_*), decided at
	 * the thread's first switch-out and again only when user space has
	 * found a runtime process since (rt_gen is then not that number plus
	 * one; see runtimes_of in capture.bpf.h). */
	__u32 rt_gen;
	__u32 rt_kinds;
	char comm[WC_COMM_LEN];
	/* The return-address part of the last two stack fingerprints, and
	 * a hash of the words each was found among (bpf/fingerprint.bpf.h). */
	__u64 fp_cand[2];
	__u64 fp_ret[2];
};

/* state: the off-CPU state in the low 16 bits, the thread's tgen (struct
 * wc_thread) in the high 16. obj and oref: what the block waited on
 * (block_obj in bpf/fingerprint.bpf.h): oref's top 8 bits are its kind (WC_OBJ_*), the
 * low 24 an fd; obj the file's inode number, the futex word's address,
 * the child's pid or the syscall of a wait on many fds. */
struct wc_okey {
	__u64 fp;
	__u32 tid;
	__u32 state;
	__u64 obj;
	__u32 oref;
	__u32 pad;
};

/* The kinds of object a block waits on (wc_okey.oref >> 24). */
enum wc_obj {
	WC_OBJ_NONE = 0,
	WC_OBJ_FD = 1,    /* obj: the file's inode number; oref: the fd */
	WC_OBJ_FUTEX = 2, /* obj: the futex word's user address */
	WC_OBJ_CHILD = 3, /* obj: wait4's or waitid's pid (-1: any child) */
	WC_OBJ_MANY = 4,  /* obj: the syscall (poll, select, epoll_wait...); oref: an fd count or epoll's fd */
};
#define WC_OREF(kind, n) ((__u32)(kind) << 24 | ((__u32)(n) & 0xffffff))

/* The key of an entry of the `reborn` map: tid in the low 32 bits, its
 * tgen in the high 32. */
#define WC_REBORN_KEY(tid, tgen) ((__u64)(tid) | (__u64)(tgen) << 32)

struct wc_oval {
	__u64 ns;
	__u64 count;
};

/* Where a CPython interpreter keeps its frame chain (per process; see
 * tools/capture/src/python/offsets.rs): tstate + frame is the current frame
 * (3.13) or the _PyCFrame whose + cframe is (3.11, 3.12: cframe >= 0);
 * then each _PyInterpreterFrame's code object, instruction pointer,
 * 2 bytes of flags (3.11: is_entry, owner; 3.12+: owner) and previous,
 * all within the first `span` bytes of a frame (read at once). */
struct wc_pycfg {
	__u32 frame;
	__s32 cframe;
	__u32 code;
	__u32 instr;
	__u32 flags;
	__u32 previous;
	/* A thread not yet in py_threads is looked for in the interpreter's
	 * list: *runtime_interp is the interpreter, + interp_threads its first
	 * thread state, + tstate_tid a state's kernel tid, + tstate_next the
	 * next state (runtime_interp 0: not done, 3.10). */
	__u64 runtime_interp;
	__u32 interp_threads;
	__u32 tstate_tid;
	__u32 tstate_next;
	__u32 span; /* at most WC_PY_SPAN */
	/* A thread's state read from its TLS instead (a thread-safe PHP's
	 * executor globals, per thread): the word at tls_off from the
	 * thread pointer (the executable's static TLS), plus tls_add
	 * (tls_add 0: not done). */
	__u64 tls_off;
	__u64 tls_add;
};

/* One Python frame as read at the stack's moment, innermost first. */
struct wc_pyframe {
	__u64 code;
	__u64 instr;
	__u32 flags;
	__u32 pad;
};

/* A stack to unwind in user space: a copy of the user stack from sp up plus
 * the registers, and the kernel stack (leaf first). */
struct wc_event {
	__u64 fp;
	__u64 ts;
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u64 lr; /* arm64's link register (x86-64: 0) */
	__u32 pid;
	__u32 tid;
	__u32 kind; /* 0 off-CPU, 1 on-CPU sample */
	__u32 state;
	__u32 kstack_bytes;
	__u32 ustack_bytes;
	char comm[WC_COMM_LEN];
	__u64 kstack[WC_KSTACK_MAX];
	__u32 py_n; /* frames in py (0: not a known Python thread) */
	__u32 py_pad; /* WC_EV_USTACK_LATER: user space copies the user stack */
	struct wc_pyframe py[WC_PY_MAX];
	__u8 ustack[WC_USTACK_MAX];
};

/* wc_event.py_pad of a blocked thread's event from a task iterator that
 * cannot sleep (before 5.18): its user stack is copied by user space from
 * sp, and kept if the thread has not switched since the visit (its count
 * of context switches then is in py[0].code). */
#define WC_EV_USTACK_LATER 1

/* Wakers (offcputime --wakers, bpf/waker.bpf.h). The context a wake-up
 * came from: a thread (its stack is the waker's), or an interrupt (the
 * kernel stack of the interrupt; the thread it stopped is a bystander). */
enum wc_wctx { WC_WCTX_THREAD = 0, WC_WCTX_HARDIRQ = 1, WC_WCTX_SOFTIRQ = 2, WC_WCTX_NMI = 3 };

/* Stack event kind of a waker's stack (wc_event.kind; state holds the
 * wc_wctx). */
#define WC_KIND_WAKER 8 /* 2 and 3 are tree.bpf.h's markers */

/* The last wake-up of a thread, from sched_waking to its switch-in. */
struct wc_wake {
	__u64 wfp;      /* the waker's stack fingerprint */
	__u64 blk_fp;   /* the waker's own last block (0: none known) */
	__u32 wtid;     /* 0 for an interrupt */
	__u32 wctx;
	__u32 blk_state;
	__u32 spare;
};

/* Off-CPU time per (thread, stack, state) and waker: a breakdown of the
 * offcpu map's entries by who ended the blocks. */
struct wc_wkey {
	__u64 fp;
	__u64 wfp;
	__u64 blk_fp;
	__u32 tid;
	__u32 state;
	__u32 wtid;
	__u32 wctx;
	__u32 blk_state;
	__u32 spare;
};

/* --timeline (timeline.bpf.h): one record per off-CPU block kept as an
 * event. The thread ran from seg_start to off_start (minus the blocks
 * under the threshold inside it: short_cnt of them, short_ns in all), then
 * was off-CPU in `state` at fingerprint `fp` until off_end. The next
 * record of the thread starts where this one ends, unless records were
 * dropped (counted) in between. */
struct wc_tl_event {
	__u64 seg_start;
	__u64 off_start;
	__u64 off_end;
	__u64 fp;
	__u64 short_ns;
	/* The block that ended at seg_start ended this much earlier: the
	 * slice after it began before its switch-in was stamped (see
	 * close_slice in capture.bpf.h). */
	__u64 back_ns;
	__u32 short_cnt;
	__u32 pid;
	__u32 tid;
	__u32 state;
	/* With --wakers: the wake-up that ended the block (wfp 0: none),
	 * as in struct wc_wake. */
	__u64 wfp;
	__u32 wtid;
	__u32 wctx;
	/* What the block waited on, as struct wc_okey's obj and oref (0:
	 * nothing, or --no-objects). */
	__u64 obj;
	__u32 oref;
	__u32 pad;
};

/* What the timeline keeps per thread between its records. */
struct wc_tl_thread {
	__u64 seg_start;
	__u64 short_ns;
	__u64 short_cnt;
	__u64 back_ns;
	__u64 last_short; /* the last block was one under the threshold */
};

enum wc_tl_stat {
	WC_TL_EVENTS = 0,
	WC_TL_DROPS,      /* ring buffer full: the interval is a gap */
	WC_TL_DROPPED_NS, /* the time of those gaps */
	WC_TL_MAP_FULL,   /* no room for the thread in tl_threads */
	WC_TL_STAT_MAX,
};


/* --probe (probe.bpf.h). The attach cookie of a probe program: the
 * probe's index in the tool's list (bits 0-15), its role (bits 16-17:
 * an event, a span's entry, a span's exit) and the span's index (bits
 * 32-47). */
#define WC_PROBE_ARGS 6
#define WC_KIND_PROBE 9 /* a probe's stack (`stack`): fp is its event's `stack` */
#define WC_PROBE_STACK (1ULL << 18) /* cookie bit: send the stack */
#define WC_SPAN_DEPTH 8
enum wc_probe_role { WC_ROLE_EVENT = 0, WC_ROLE_BEGIN = 1, WC_ROLE_END = 2 };

/* One firing of an event probe, or one span closed by its exit (then
 * start, off and depth are set: off by state, of the blocks the thread
 * closed between entry and exit). args: the entry's; ret: the exit's
 * return value (a uretprobe's) or arguments' first. */
struct wc_probe_event {
	__u64 ts;
	__u64 start;
	__u64 off[4];
	__u64 args[WC_PROBE_ARGS];
	__u64 ret;
	__u64 cookie;
	/* With `stack`: the fp of the WC_KIND_PROBE stack event sent before
	 * this record (0: none, or it found the ring buffer full). */
	__u64 stack;
	__u32 pid;
	__u32 tid;
	__u32 depth;
	__u32 role;
};

/* A thread's open spans, innermost last. */
struct wc_span_level {
	__u64 start;
	__u64 off[4];
	__u64 args[WC_PROBE_ARGS];
	__u64 span;
};

struct wc_span_stack {
	struct wc_span_level lv[WC_SPAN_DEPTH];
	__u32 n;
	__u32 pad;
};

enum wc_probe_stat {
	WC_PR_EVENTS = 0,
	WC_PR_DROPS,     /* ring buffer full */
	WC_PR_TOO_DEEP,  /* an entry past WC_SPAN_DEPTH open spans: not a span */
	WC_PR_UNMATCHED, /* an exit with no entry open (the span began before the capture) */
	WC_PR_MAP_FULL,
	WC_PR_STAT_MAX,
};

#endif
