//! What the running kernel can give the BPF programs, read once from its
//! own BTF (/sys/kernel/btf/vmlinux) before anything is loaded: the
//! helpers it knows (`enum bpf_func_id`), sched_switch's arguments, and
//! the types that came with a feature. The BPF side reads the same facts
//! through CO-RE (bpf/compat.bpf.h); here they choose between programs
//! (tp_btf or raw_tp, a sleepable task iterator or not) and map flags,
//! and say once what a kernel cannot give. Nothing is decided from the
//! release number: distributions backport.

use std::sync::OnceLock;

use libbpf_rs::btf::types::{Enum, FuncProto, Ptr, Typedef};
use libbpf_rs::btf::{Btf, ReferencesType};

/// The running kernel's BPF features that differ between 5.10 and 6.18.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kernel {
    /// bpf_get_current_task_btf (5.11) and bpf_task_pt_regs (5.15): the
    /// tp_btf programs read the current task's fields with plain loads.
    /// Without them the raw_tp programs are loaded (a helper call a read).
    pub btf_task: bool,
    /// sched_switch passes prev_state (5.18); before, it is read from prev.
    pub switch_state_arg: bool,
    /// Sleepable task iterators and bpf_copy_from_user_task (5.18): the
    /// start-of-capture snapshot copies a blocked thread's user stack in
    /// the kernel. Without them user space copies it (process_vm_readv)
    /// from the stack pointer the kernel saved.
    pub sleepable_iter: bool,
    /// Hash maps allocated as used (not all at load) in perf_event
    /// programs (6.1, bpf_mem_alloc): wcdump's tick map.
    pub lazy_maps_in_perf: bool,
    /// bpf_get_attach_cookie (5.15): the probes of --span/--probe.
    pub attach_cookie: bool,
}

impl Kernel {
    /// Everything, as on the kernel these tools were first written on.
    pub const NEWEST: Kernel =
        Kernel { btf_task: true, switch_state_arg: true, sleepable_iter: true, lazy_maps_in_perf: true, attach_cookie: true };

    /// The running kernel's features (read once). A kernel without BTF
    /// is taken to have all of them: the load then says what it lacks.
    pub fn get() -> Kernel {
        static K: OnceLock<Kernel> = OnceLock::new();
        *K.get_or_init(|| {
            let k = match Btf::from_vmlinux() {
                Ok(btf) => Kernel::read(&btf),
                Err(_) => Kernel::NEWEST,
            };
            // For tests: the fallbacks of an older kernel on this one.
            match std::env::var("WALLCLOCK_KERNEL_LACKS") {
                Ok(tags) => k.without(&tags),
                Err(_) => k,
            }
        })
    }

    /// What 5.10 has: none of the above.
    pub fn oldest() -> Kernel {
        Kernel { btf_task: false, switch_state_arg: false, sleepable_iter: false, lazy_maps_in_perf: false, attach_cookie: false }
    }

    fn read(btf: &Btf<'_>) -> Kernel {
        let helpers: Vec<String> = btf
            .type_by_name::<Enum<'_>>("bpf_func_id")
            .map(|e| e.iter().filter_map(|m| m.name.map(|n| n.to_string_lossy().into_owned())).collect())
            .unwrap_or_default();
        let has = |h: &str| helpers.iter().any(|n| n == h);
        Kernel {
            btf_task: has("BPF_FUNC_get_current_task_btf") && has("BPF_FUNC_task_pt_regs"),
            switch_state_arg: switch_args(btf).is_none_or(|n| n >= 4),
            sleepable_iter: has("BPF_FUNC_copy_from_user_task"),
            lazy_maps_in_perf: btf.type_by_name::<libbpf_rs::btf::types::Struct<'_>>("bpf_mem_alloc").is_some(),
            attach_cookie: has("BPF_FUNC_get_attach_cookie"),
        }
    }

    /// Each feature: its tag (the header's `kernel_lacks` name), what the
    /// capture does without it (None: nothing the user would notice), and
    /// whether this kernel has it. One table for the lists below.
    fn features(&mut self) -> [(&'static str, Option<&'static str>, &mut bool); 5] {
        [
            ("task_btf", Some("no bpf_get_current_task_btf/bpf_task_pt_regs (5.15): raw_tp programs, fields read by helper"), &mut self.btf_task),
            ("switch_prev_state", Some("no prev_state in sched_switch (5.18): read from the task"), &mut self.switch_state_arg),
            (
                "sleepable_iter",
                Some("no sleepable task iterator (5.18): stacks of threads blocked at the start copied from user space"),
                &mut self.sleepable_iter,
            ),
            ("lazy_maps_in_perf", None, &mut self.lazy_maps_in_perf),
            ("attach_cookie", Some("no bpf_get_attach_cookie (5.15): --probe and --span unavailable"), &mut self.attach_cookie),
        ]
    }

    /// These features (tags as [`Kernel::lacks_tags`] names them) taken
    /// away.
    pub fn without(mut self, tags: &str) -> Kernel {
        let tags: Vec<&str> = tags.split(',').map(str::trim).collect();
        for (tag, _, has) in self.features() {
            if tags.contains(&tag) {
                *has = false;
            }
        }
        self
    }

    /// One line a missing feature: what the capture does without it. Empty
    /// on a kernel that has them all.
    pub fn lacks(&self) -> Vec<&'static str> {
        self.clone().features().into_iter().filter(|f| !*f.2).filter_map(|f| f.1).collect()
    }

    /// The tags of what is missing (the header's `kernel_lacks`).
    pub fn lacks_tags(&self) -> Vec<&'static str> {
        self.clone().features().into_iter().filter(|f| !*f.2).map(|f| f.0).collect()
    }
}

/// The running kernel's release (`uname -r`).
pub fn release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_else(|_| "?".into())
}

/// The number of sched_switch's arguments (its `btf_trace_sched_switch`
/// prototype less the leading context pointer), None if not found.
fn switch_args(btf: &Btf<'_>) -> Option<usize> {
    let td = btf.type_by_name::<Typedef<'_>>("btf_trace_sched_switch")?;
    let ptr = Ptr::try_from(td.referenced_type()).ok()?;
    let proto = FuncProto::try_from(ptr.referenced_type()).ok()?;
    Some(proto.len().saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine's kernel (6.18 in CI) has everything; the list of what
    /// 5.10 lacks names each feature once.
    #[test]
    fn this_kernel_and_the_oldest() {
        if let Ok(btf) = Btf::from_vmlinux() {
            assert_eq!(switch_args(&btf), Some(4), "sched_switch's arguments on a kernel >= 5.18");
            let k = Kernel::read(&btf);
            assert!(k.btf_task && k.sleepable_iter && k.attach_cookie, "{k:?}");
        }
        let old = Kernel::oldest();
        assert_eq!(old.lacks().len(), 4);
        assert_eq!(old.lacks_tags().join(","), "task_btf,switch_prev_state,sleepable_iter,lazy_maps_in_perf,attach_cookie");
        assert!(Kernel::NEWEST.lacks().is_empty() && Kernel::NEWEST.lacks_tags().is_empty());
        assert_eq!(Kernel::NEWEST.without(&old.lacks_tags().join(",")), old);
    }
}
