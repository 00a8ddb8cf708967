/* What differs between the kernels the capture programs load on (5.10 and
 * later), decided where the program is loaded, never at run time:
 * bpf_core_enum_value_exists() and bpf_core_field_exists() are relocated
 * by libbpf against the running kernel's BTF to constants, and the
 * verifier drops the branch a constant rules out, helper calls unknown to
 * that kernel included. User space reads the same facts from the same
 * BTF (tools/capture/src/kernel.rs) to choose programs and say what a
 * kernel cannot give.
 *
 *   bpf_get_current_task_btf   5.11
 *   bpf_task_pt_regs           5.15
 *   bpf_copy_from_user_task    5.18 (with sleepable iterators)
 *   sched_switch's prev_state  5.18 (a 4th tracepoint argument)
 *   task_struct.__state        5.14 (`state` before)
 *   bpf_rdonly_cast            6.2  (to a struct; to void later)
 */
#ifndef COMPAT_BPF_H
#define COMPAT_BPF_H

#include <bpf/bpf_core_read.h>
/* The architecture's registers and numbers (bpf/x86/, bpf/arm64/). */
#include "regs.bpf.h"

#define WC_HAS_HELPER(name) bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_##name)

/* task_struct before 5.14: its state was `state`. */
struct task_struct___pre514 {
	volatile long state;
} __attribute__((preserve_access_index));

/* The task's state (TASK_RUNNING 0, TASK_INTERRUPTIBLE 1, ...), however
 * the kernel names the field. */
static __always_inline unsigned int task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(t->__state))
		return BPF_CORE_READ(t, __state);
	return BPF_CORE_READ((struct task_struct___pre514 *)t, state);
}

/* The current task. A BTF pointer (plain loads allowed) where the kernel
 * has bpf_get_current_task_btf; before 5.11 a number, to be read with
 * BPF_CORE_READ only: the tp_btf programs (which read with plain loads)
 * are then not loaded (kernel.rs), the raw_tp ones are. */
static __always_inline struct task_struct *current_task(void)
{
	if (WC_HAS_HELPER(get_current_task_btf))
		return bpf_get_current_task_btf();
	return (struct task_struct *)bpf_get_current_task();
}

/* Where a task's user registers are saved: the top of its kernel stack,
 * as the kernel's task_pt_regs() computes it (x86_64 and arm64 alike:
 * THREAD_SIZE above the stack's base, less the registers). A BTF pointer
 * where the kernel has bpf_task_pt_regs, else a number for BPF_CORE_READ. */
#define WC_THREAD_SIZE (16384)
static __always_inline struct pt_regs *task_regs(struct task_struct *t)
{
	if (WC_HAS_HELPER(task_pt_regs))
		return (struct pt_regs *)bpf_task_pt_regs(t);
	__u64 stack = (__u64)BPF_CORE_READ(t, stack);
	if (!stack)
		return 0;
	return (struct pt_regs *)(stack + WC_THREAD_SIZE - bpf_core_type_size(struct pt_regs));
}

/* sched_switch's prev_state: its 4th argument from 5.18 (user space
 * sets switch_state_arg from the tracepoint's BTF prototype), before that
 * read from prev itself, as the tracepoint itself then did. Read from ctx
 * only where the argument exists: the verifier refuses a read past the
 * tracepoint's arguments, in the branch it keeps. */
const volatile bool switch_state_arg = true;

static __always_inline unsigned int switch_prev_state(__u64 *ctx, struct task_struct *prev)
{
	if (switch_state_arg)
		return (unsigned int)ctx[3];
	return task_state(prev);
}

#endif
