//! What the capture loop feeds as it goes: each ring-buffer record to the
//! unwinder (exec and fork markers) or the tool (stacks), the runtime
//! readers told of new processes, and the side samplers (goroutines,
//! asyncio tasks) told of the targets.

use anyhow::Result;
use libbpf_rs::MapHandle;

use super::skel::CaptureSkel;
use super::tool::Tool;
use crate::runtimes::BpfMaps;
use crate::session::Session;
use crate::unwind::Unwind;
use crate::{bpf, tree};

/// The tool and the unwinder, as the ring buffer's records reach them.
pub(super) struct Live<'t, T: Tool> {
    pub tool: &'t mut T,
    pub unwind: Unwind,
    /// py_threads, py_cfg, rb_cfg, rt_gen: for a runtime looked for at an
    /// exec, while the skeleton is borrowed elsewhere.
    rt: [MapHandle; 4],
}

impl<'t, T: Tool> Live<'t, T> {
    pub fn new(tool: &'t mut T, unwind: Unwind, skel: &T::Skel) -> Result<Self> {
        let m = skel.maps();
        let rt = [MapHandle::try_from(m.py_threads)?, MapHandle::try_from(m.py_cfg)?, MapHandle::try_from(m.rb_cfg)?, MapHandle::try_from(m.rt_gen)?];
        Ok(Live { tool, unwind, rt })
    }

    /// One record of the ring buffer. Exec and fork markers travel in
    /// order with the stacks: the unwinder follows each process's images,
    /// and a runtime that must be known from its first stacks (PHP) is
    /// looked for at its exec, not a turn later.
    pub fn event(&mut self, e: &[u8]) {
        if !tree::marker(e, &mut self.unwind) {
            self.tool.event(e, &mut self.unwind);
        } else if let Some(pid) = tree::exec_pid(e) {
            let maps = BpfMaps { py_threads: &self.rt[0], py_cfg: &self.rt[1], rb_cfg: &self.rt[2] };
            if self.unwind.runtimes.at_exec(pid, &maps) {
                bpf::bump_gen(&self.rt[3]);
            }
        }
    }

    /// The runtimes among the targets, before the start and at every turn
    /// (a new thread's frames are read from then on).
    pub fn refresh(&mut self, sess: &Session, skel: &T::Skel) {
        let m = skel.maps();
        let mut pids = sess.pids.clone();
        pids.extend(bpf::u32_keys(m.tgids));
        pids.sort_unstable();
        pids.dedup();
        let maps = BpfMaps { py_threads: m.py_threads, py_cfg: m.py_cfg, rb_cfg: m.rb_cfg };
        if self.unwind.runtimes.refresh(&pids, &maps) {
            bpf::bump_gen(m.rt_gen);
        }
    }
}

/// The side samplers a tool asked for (`--goroutines`, `--tasks`).
pub(super) struct Samplers {
    goroutines: Option<crate::samplers::Sampler>,
    tasks: Option<crate::samplers::Sampler>,
}

impl Samplers {
    pub fn start<T: Tool>(tool: &T) -> Result<Samplers> {
        let goroutines = tool.goroutines().map(|(hz, out)| crate::samplers::goroutines::start(T::NAME, hz, &out)).transpose()?;
        let tasks = tool.tasks().map(|(hz, out)| crate::samplers::asyncio::start(hz, &out)).transpose()?;
        Ok(Samplers { goroutines, tasks })
    }

    /// The target processes now: the session's and those BPF added.
    pub fn targets(&self, pids: &[u32], more: impl Fn() -> Vec<u32>) {
        if let Some(g) = &self.goroutines {
            g.targets(pids, &more());
        }
        if let Some(t) = &self.tasks {
            t.targets(pids, &more());
        }
    }

    /// Stop them and write their side files: one failing loses nothing
    /// else of the capture.
    pub fn finish(self, tool: &str) {
        if let Err(e) = self.goroutines.map(|g| g.finish()).transpose() {
            eprintln!("{tool}: warning: goroutines: {e:#}");
        }
        if let Err(e) = self.tasks.map(|t| t.finish()).transpose() {
            eprintln!("{tool}: warning: tasks: {e:#}");
        }
    }
}
