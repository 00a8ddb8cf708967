//! [`capture_skel!`]: the driver's traits for a tool's generated skeleton.
//! Every capture program includes capture.bpf.h and tree.bpf.h, so every
//! skeleton has the same rodata, .bss, maps and programs under the same
//! names; only its Rust types differ, one set per tool.

/// Implement [`crate::driver::OpenCapture`] and [`crate::driver::CaptureSkel`]
/// for a tool's skeleton: `capture_skel!(OpenSkel<'static>, Skel<'static>,
/// types::wc_thread)`. The last type, the thread record as the BPF
/// object's own BTF lays it out, is checked against the generated
/// [`crate::event::WcThread`].
#[macro_export]
macro_rules! capture_skel {
    ($open:ty, $skel:ty, $wc_thread:ty) => {
        const _: () =
            assert!(::std::mem::size_of::<$wc_thread>() == ::std::mem::size_of::<$crate::event::WcThread>());

        impl $crate::driver::OpenCapture for $open {
            fn common(
                &mut self,
                c: &$crate::driver::Common,
                btf: bool,
            ) -> ::std::result::Result<(), $crate::libbpf_rs::Error> {
                let ro = self.maps.rodata_data.as_deref_mut().expect("rodata");
                let f = c.filter;
                ro.filter_tgid = f.filter_tgid;
                ro.single_tgid = f.single_tgid;
                ro.follow_children = f.follow;
                ro.filter_cgroup = f.cgroup.is_some();
                (ro.cgroup_id, ro.cgroup_level) = f.cgroup.unwrap_or((0, 0));
                ro.filter_tid = c.filter_tid;
                ro.thread_kind = c.thread_kind;
                ro.want_ustack = c.want_ustack;
                ro.want_kstack = c.want_kstack;
                ro.snap_stacks = c.snap_stacks;
                self.maps.threads.set_max_entries(c.max_threads.max(64))?;
                // Processes of a tree, at most as many as threads.
                self.maps.tgids.set_max_entries(c.max_threads.max(1024))?;
                self.maps.events.set_max_entries(c.ringbuf_bytes)?;
                // One scratch event per CPU (see ring_room in capture.bpf.h).
                let cpus = $crate::libbpf_rs::num_possible_cpus()?;
                self.maps.ev_scratch.set_max_entries(u32::try_from(cpus).unwrap_or(u32::MAX))?;
                self.progs.fork_btf.set_autoload(f.follow && btf);
                self.progs.fork_raw.set_autoload(f.follow && !btf);
                self.progs.exec_btf.set_autoload(btf);
                self.progs.exec_raw.set_autoload(!btf);
                let k = $crate::kernel::Kernel::get();
                ro.switch_state_arg = k.switch_state_arg;
                self.progs.snapshot.set_autoload(k.sleepable_iter);
                self.progs.snapshot_ns.set_autoload(!k.sleepable_iter);
                Ok(())
            }
        }

        impl $crate::driver::CaptureSkel for $skel {
            fn maps(&self) -> $crate::driver::Maps<'_> {
                $crate::driver::Maps {
                    events: &self.maps.events,
                    tgids: &self.maps.tgids,
                    tids: &self.maps.tids,
                    threads: &self.maps.threads,
                    reborn: &self.maps.reborn,
                    stats: &self.maps.stats,
                    py_threads: &self.maps.py_threads,
                    py_cfg: &self.maps.py_cfg,
                    rb_cfg: &self.maps.rb_cfg,
                    rt_gen: &self.maps.rt_gen,
                }
            }

            fn snapshot_prog(&self) -> &$crate::libbpf_rs::ProgramMut<'static> {
                if $crate::kernel::Kernel::get().sleepable_iter {
                    &self.progs.snapshot
                } else {
                    &self.progs.snapshot_ns
                }
            }

            fn tree_prog(
                &self,
                which: $crate::driver::TreeProg,
                btf: bool,
            ) -> &$crate::libbpf_rs::ProgramMut<'static> {
                use $crate::driver::TreeProg;
                match (which, btf) {
                    (TreeProg::Exec, true) => &self.progs.exec_btf,
                    (TreeProg::Exec, false) => &self.progs.exec_raw,
                    (TreeProg::Fork, true) => &self.progs.fork_btf,
                    (TreeProg::Fork, false) => &self.progs.fork_raw,
                }
            }

            fn hold(&mut self, tgid: u32) {
                let bss = self.maps.bss_data.as_deref_mut().expect("bss");
                // SAFETY: as in set_bss.
                unsafe { ::std::ptr::write_volatile(&mut bss.held_tgid, tgid) };
            }

            fn exec_ns(&self) -> u64 {
                let bss = self.maps.bss_data.as_deref().expect("bss");
                // SAFETY: the BPF side writes it: read it volatile.
                unsafe { ::std::ptr::read_volatile(&bss.exec_ns) }
            }

            fn set_bss(&mut self, start_ns: Option<u64>, end_ns: Option<u64>, tree_grown: bool) {
                let bss = self.maps.bss_data.as_deref_mut().expect("bss");
                // SAFETY: bss is the program's mmapped .bss; the BPF side
                // reads it, so every write is volatile.
                unsafe {
                    if let Some(s) = start_ns {
                        ::std::ptr::write_volatile(&mut bss.start_ns, s);
                    }
                    if tree_grown {
                        ::std::ptr::write_volatile(&mut bss.tree_grown, 1);
                    }
                    if let Some(e) = end_ns {
                        ::std::ptr::write_volatile(&mut bss.end_ns, e);
                    }
                }
            }
        }
    };
}
