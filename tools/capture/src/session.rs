//! One capture from start to stop: the targets (pids, process trees, a
//! cgroup), a launched command, the threads found blocked at the start,
//! when to stop.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::cgroup::Cgroup;
use crate::launch::{spawn_held, Launched};
use crate::event::WcThread;
use crate::procfs::{self, Kallsyms};
use crate::steal::{self, ExecClock};
use crate::target::TargetArgs;
use crate::unwind::Unwind;

/// A thread of the target as /proc saw it just after the capture began.
#[derive(Debug, Clone)]
pub struct Initial {
    pub pid: u32,
    pub state: char,
    pub comm: String,
    /// Root first; empty when the thread was running (no syscall stack).
    pub ustack: Vec<u64>,
    pub kstack: Vec<u64>,
    /// Its CPU clock then (for the steal of a slice begun before the start).
    pub exec: Option<ExecClock>,
}

/// What the BPF target filter is told (the rodata of either tool).
#[derive(Debug, Clone, Copy)]
pub struct Filter {
    pub filter_tgid: bool,
    /// The one target process, when there is one: a compare per switch.
    pub single_tgid: u32,
    /// New processes of traced ones are traced too (tree.bpf.h).
    pub follow: bool,
    /// (cgroup id, level) for --cgroup.
    pub cgroup: Option<(u64, u32)>,
}

/// Each blocked thread's kernel stack at the start: (tid, addresses).
type Kstacks = Vec<(u32, Vec<u64>)>;

pub struct Session {
    /// Processes traced: at the start, then (see [`Session::add_pids`])
    /// every process captured.
    pub pids: Vec<u32>,
    /// `-- COMMAND` or `-p -C`: descendants are followed.
    pub follow: bool,
    pub cgroup: Option<Cgroup>,
    tree_checked: Option<Instant>,
    pub command: Option<Vec<String>>,
    pub launched: Option<Launched>,
    /// `-p PID --from-exec`: captured from its next exec.
    from_exec: Option<u32>,
    pub duration: Option<f64>,
    pub start_ns: u64,
    /// Where -d ends the window, CLOCK_MONOTONIC ns: its start (a held
    /// command's exec) plus -d, once known.
    pub deadline: Option<u64>,
    pub initial: BTreeMap<u32, Initial>,
    /// The kernel stacks of `initial`, being resolved by name from
    /// kallsyms (see [`Session::settle`]).
    kstacks: Option<std::thread::JoinHandle<Kstacks>>,
    /// CPU clocks of the target's threads just after the stop.
    pub at_stop: BTreeMap<u32, ExecClock>,
    /// The machine's steal + irq + softirq (/proc/stat) read at the start
    /// and at the stop: no capture claims more (see [`Session::cap_steal`]).
    pub machine_steal: (Option<u64>, Option<u64>),
    /// The threads' steal before [`Session::cap_steal`] scaled it, by
    /// (pid, tid): the last `--every` window is cut from the records
    /// before the cap (capped to the machine's over that window alone).
    pub uncapped_steal: std::collections::HashMap<(u32, u32), u64>,
    tids: Vec<u32>,
    pub exit_code: Option<i32>,
    /// System-wide: every thread of /proc just after the start (see
    /// [`crate::hidden`]).
    pub listed: BTreeMap<u32, crate::hidden::Listed>,
    ready_file: Option<std::path::PathBuf>,
    /// JVM targets asked for their JIT symbol map (crate::runtimes::jvm).
    jvms: crate::runtimes::jvm::Jvms,
    /// --prepare/--activate, for the header.
    when: crate::when::WhenArgs,
}

impl Session {
    /// Validate the targets and launch `command` held before exec.
    pub fn prepare(args: &TargetArgs, positional_duration: Option<f64>, command: &[String]) -> Result<Session> {
        let duration = args.validate(positional_duration)?;
        // Read before the first stack event (a scan of kallsyms while
        // events arrive would stall the ring buffer's consumer), beside
        // the BPF programs' load: 150 ms, most of it the kernel's.
        std::thread::spawn(procfs::dispatch_ranges);
        let mut pids = args.known_pids();
        let cgroup = match &args.cgroup {
            Some(_) if !command.is_empty() => {
                bail!("--cgroup does not go with `-- COMMAND`: start the command in the cgroup")
            }
            Some(p) => Some(Cgroup::open(p)?),
            None => None,
        };
        if let Some(c) = &cgroup {
            pids = c.procs();
        }
        if args.children {
            let d = procfs::descendants(&pids);
            pids.extend(d);
        }
        let mut launched = None;
        let stream_on_stdout = args.output.as_ref().is_none_or(|p| p.as_os_str() == "-");
        if !command.is_empty() {
            let l = spawn_held(command, stream_on_stdout)?;
            pids.push(l.pid());
            launched = Some(l);
        }
        Ok(Session {
            pids,
            follow: args.children || !command.is_empty(),
            cgroup,
            tree_checked: None,
            command: (!command.is_empty()).then(|| command.to_vec()),
            launched,
            from_exec: args.from_exec.then(|| args.pids[0]),
            duration,
            start_ns: 0,
            deadline: None,
            initial: BTreeMap::new(),
            kstacks: None,
            at_stop: BTreeMap::new(),
            machine_steal: (None, None),
            uncapped_steal: Default::default(),
            tids: Vec::new(),
            exit_code: None,
            listed: BTreeMap::new(),
            ready_file: args.ready_file.clone(),
            jvms: crate::runtimes::jvm::Jvms::default(),
            when: args.when.clone(),
        })
    }

    /// No target: every thread of the machine.
    pub fn system_wide(&self) -> bool {
        self.pids.is_empty() && self.cgroup.is_none() && self.command.is_none()
    }

    /// The process captured only from its exec: the command launched with
    /// `-- COMMAND`, or `-p PID --from-exec`.
    pub fn held_pid(&self) -> Option<u32> {
        self.launched.as_ref().map(|l| l.pid()).or(self.from_exec)
    }

    /// The capture is attached from `start_ns`: note the threads that are
    /// blocked now (with the stacks they block in), then let a launched
    /// command run.
    pub fn begin(&mut self, start_ns: u64, tids: &[u32], unwind: &mut Unwind) -> Result<()> {
        self.start_ns = start_ns;
        self.machine_steal.0 = steal::machine_ns();
        self.tids = tids.to_vec();
        if let Some(l) = self.launched.as_mut() {
            l.release()?;
        }
        // Kernel stacks come by name from /proc; all names are resolved in
        // one pass over kallsyms, in a thread of its own: 150 ms that the
        // attach no longer waits for (see settle).
        let mut named: Vec<(u32, Vec<procfs::NamedFrame>)> = Vec::new();
        for &pid in &self.pids {
            if self.held_pid() == Some(pid) {
                continue;
            }
            unwind.refresh(pid);
            for tid in procfs::threads(pid) {
                if !tids.is_empty() && !tids.contains(&tid) {
                    continue;
                }
                let exec = steal::read(pid, tid);
                let state = procfs::state(pid, tid).unwrap_or('?');
                let comm = procfs::comm(pid, tid).unwrap_or_default();
                let mut ustack = Vec::new();
                if state != 'R' {
                    if let Some((sp, pc)) = procfs::syscall_regs(pid, tid) {
                        let stack = procfs::read_stack(pid, sp, crate::event::USTACK_MAX);
                        // Named as the stacks taken in the capture are
                        // (V8's and Erlang's frames from their tables).
                        ustack = unwind.unwind_named(pid, crate::realtime::monotonic_ns(), pc, sp, 0, 0, &stack);
                    }
                    named.push((tid, procfs::task_stack_names(pid, tid)));
                }
                self.initial.insert(tid, Initial { pid, state, comm, ustack, kstack: Vec::new(), exec });
            }
        }
        if !named.is_empty() {
            self.kstacks = Some(std::thread::spawn(move || {
                let ksyms = Kallsyms::load_names(named.iter().flat_map(|(_, f)| f.iter().map(|(n, _)| n.as_str())));
                named.iter().map(|(tid, frames)| (*tid, ksyms.resolve(frames))).collect()
            }));
        }
        if self.system_wide() {
            self.listed = crate::hidden::list_all();
        }
        // A -t thread that ended between the check of the arguments and
        // now would leave an empty capture that looks like a success.
        if let Some(t) = tids.iter().find(|t| !self.initial.contains_key(t)) {
            bail!("thread {t} (-t) exited before the capture began");
        }
        self.announce();
        if let Some(f) = &self.ready_file {
            std::fs::write(f, b"")
                .map_err(|e| anyhow::anyhow!("--ready-file {}: {e}", f.display()))?;
        }
        Ok(())
    }

    /// [`Session::settle`] if the kernel stacks are resolved already
    /// (a turn of the capture loop does not wait for them).
    pub fn settle_if_ready(&mut self) {
        if self.kstacks.as_ref().is_some_and(|h| h.is_finished()) {
            self.settle();
        }
    }

    /// Whether the stacks of the threads blocked at the start are final.
    pub fn settled(&self) -> bool {
        self.kstacks.is_none()
    }

    /// The kernel stacks of the threads blocked at the start, once
    /// resolved: call before reading `initial` (a window's cut, the stop).
    pub fn settle(&mut self) {
        let Some(h) = self.kstacks.take() else { return };
        for (tid, k) in h.join().unwrap_or_default() {
            if let Some(i) = self.initial.get_mut(&tid) {
                i.kstack = k;
            }
        }
    }

    /// The filter the BPF programs apply.
    pub fn filter(&self) -> Filter {
        let by_pid = self.cgroup.is_none() && !self.pids.is_empty();
        Filter {
            filter_tgid: by_pid,
            single_tgid: if by_pid && self.pids.len() == 1 { self.pids[0] } else { 0 },
            follow: self.follow,
            cgroup: self.cgroup.as_ref().map(|c| (c.id, c.level)),
        }
    }

    /// Processes found to be traced since the start (the BPF `tgids` map
    /// of a tree, the pids of the threads captured).
    pub fn add_pids(&mut self, pids: impl IntoIterator<Item = u32>) {
        if self.pids.is_empty() && self.cgroup.is_none() {
            return; // system-wide stays "no pids"
        }
        self.pids.extend(pids);
        self.pids.sort_unstable();
        self.pids.dedup();
    }

    /// With -p -C: descendants born since the walk of /proc in `prepare`
    /// (before the fork hook was attached); added to the targets.
    pub fn late_children(&mut self) -> Vec<u32> {
        if !self.follow || self.launched.is_some() {
            return Vec::new();
        }
        let late: Vec<u32> = procfs::descendants(&self.pids).into_iter().filter(|p| !self.pids.contains(p)).collect();
        self.pids.extend(&late);
        late
    }

    /// The pids of the threads captured (processes that exited included).
    pub fn add_thread_pids(&mut self, threads: &[(Vec<u8>, Vec<u8>)]) {
        let pids: Vec<u32> = threads.iter().filter_map(|(_, v)| crate::event::from_bytes::<WcThread>(v)).map(|t| t.pid).collect();
        self.add_pids(pids);
    }

    /// The capture stopped: read the CPU clock of every thread of the
    /// targets (for the steal of the slices still open). `tree`: the
    /// processes the BPF side followed.
    pub fn stopped(&mut self, tree: Vec<u32>) {
        self.machine_steal.1 = steal::machine_ns();
        self.settle();
        if self.follow {
            self.add_pids(tree);
        }
        self.jvms.at_stop(&self.pids);
        if let Some(c) = &self.cgroup {
            let now = c.procs();
            self.add_pids(now);
        }
        for &pid in &self.pids {
            for tid in procfs::threads(pid) {
                if self.tids.is_empty() || self.tids.contains(&tid) {
                    if let Some(c) = steal::read(pid, tid) {
                        self.at_stop.insert(tid, c);
                    }
                }
            }
        }
    }

    /// System-wide, the threads hidden from BPF (see [`crate::hidden`]),
    /// given the thread map at the stop.
    pub fn hidden(&self, threads: &[(u32, WcThread)], end_ns: u64) -> Vec<crate::hidden::Hidden> {
        crate::hidden::find(&self.listed, threads, self.start_ns, end_ns)
    }

    /// The CPU clocks of the threads still running at the stop that
    /// `stopped` did not read (system-wide, there are no targets to
    /// list): they bound what the open slice ran (steal::open_slice).
    pub fn clocks_of_running(&mut self, threads: &[(u32, WcThread)]) {
        for &(tid, th) in threads {
            if th.running != 0 && th.exit_ns == 0 && !self.at_stop.contains_key(&tid) {
                if let Some(c) = steal::read(th.pid, crate::event::real_tid(tid)) {
                    self.at_stop.insert(tid, c);
                }
            }
        }
    }

    /// The open slice at the stop, (on-CPU, off-CPU): see steal::open_slice.
    pub fn open_slice(&self, tid: u32, th: &WcThread, end_ns: u64) -> (u64, u64) {
        steal::open_slice(th, end_ns, self.at_stop.get(&tid).copied())
    }

    /// A thread's steal over the window (see [`crate::steal`]); `on_ns`
    /// includes the slice open at the stop.
    pub fn steal_of(&self, tid: u32, th: &WcThread, end_ns: u64, on_ns: u64) -> u64 {
        let at_start = self.initial.get(&tid).and_then(|i| i.exec);
        steal::thread_steal(th, end_ns, on_ns, at_start, self.at_stop.get(&tid).copied())
    }

    /// Scale the threads' steal down to the machine's own over the window
    /// when their sum is more (see [`steal::cap`]); what each was before
    /// is kept in `uncapped_steal`.
    pub fn cap_steal(&mut self, records: &mut [wallclock_stream::Record]) {
        let (Some(a), Some(b)) = self.machine_steal else { return };
        for r in records.iter() {
            if let wallclock_stream::Record::Thread(t) = r {
                if let Some(s) = t.steal_ns {
                    self.uncapped_steal.insert((t.pid, t.tid), s);
                }
            }
        }
        steal::cap_records(records, b.saturating_sub(a));
    }

    /// The stream header every capture tool writes for this session.
    pub fn header(&self, tool: &str, version: &str, end_ns: u64) -> wallclock_stream::Header {
        let mut h = wallclock_stream::Header::new(tool, version);
        h.pids = self.pids.clone();
        h.command = self.command.clone();
        h.start_ns = Some(self.start_ns);
        h.end_ns = Some(end_ns);
        h.start_realtime_ns = Some(crate::when::realtime_of(self.start_ns));
        h.kernel_lacks = crate::kernel::Kernel::get().lacks_tags().into_iter().map(str::to_string).collect();
        h.runtime_versions = crate::runtimes::Runtimes::default().versions();
        self.when.to_header(&mut h);
        h
    }

    /// On a terminal, say what is traced and how it ends (as bcc does);
    /// scripts that redirect stderr get nothing.
    fn announce(&self) {
        use std::io::IsTerminal;
        if !std::io::stderr().is_terminal() {
            return;
        }
        let tool = std::env::args().next().unwrap_or_default();
        let tool = tool.rsplit('/').next().unwrap_or("capture");
        let what = match (&self.command, self.pids.is_empty()) {
            _ if self.cgroup.is_some() => format!("cgroup {}", self.cgroup.as_ref().unwrap().path.display()),
            (Some(c), _) => {
                format!("{} (pid {}) and its children", c.join(" "), self.launched.as_ref().map_or(0, |l| l.pid()))
            }
            (None, true) => "all threads".to_string(),
            (None, false) => format!(
                "pid {}{}",
                self.pids.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
                if self.follow { " and their children" } else { "" }
            ),
        };
        let until = match (self.duration, &self.command) {
            (Some(d), _) => format!("for {d} s (Ctrl-C to stop early)"),
            (None, Some(_)) => "until it exits (Ctrl-C to stop)".to_string(),
            (None, None) => "until Ctrl-C or the target exits".to_string(),
        };
        eprintln!("{tool}: tracing {what} {until}");
    }

    /// Whether to stop now: duration over, Ctrl-C, the launched command
    /// exited, or every target process is gone (with -C, every process of
    /// the tree: `tree` lists those the BPF side followed; a cgroup may be
    /// empty for a while and does not end the capture).
    pub fn should_stop(&mut self, tree: impl FnOnce() -> Vec<u32>) -> bool {
        self.jvms.tick(&self.pids);
        if crate::signal::stopped() {
            return true;
        }
        if self.deadline.is_some_and(|d| crate::target::monotonic_ns() >= d) {
            return true;
        }
        if let Some(l) = self.launched.as_mut() {
            if let Some(code) = l.try_exit_code() {
                self.exit_code = Some(code);
                return true;
            }
            return false;
        }
        if self.cgroup.is_some() || self.pids.is_empty() || self.pids.iter().any(|&p| procfs::exists(p)) {
            return false;
        }
        if !self.follow {
            return true;
        }
        // The roots are gone; their descendants may live on. Read the
        // tree (a map walk) a few times a second, not at every poll.
        if self.tree_checked.is_some_and(|t| t.elapsed() < Duration::from_millis(200)) {
            return false;
        }
        self.tree_checked = Some(Instant::now());
        !tree().into_iter().any(procfs::exists)
    }

    /// The tool's exit code: the launched command's, else 0.
    pub fn finish(&mut self) -> i32 {
        let tool = std::env::args().next().unwrap_or_default();
        self.jvms.finish(tool.rsplit('/').next().unwrap_or("capture"));
        if let Some(c) = self.exit_code {
            return c;
        }
        match self.launched.as_mut() {
            Some(l) => l.wait_exit_code(),
            None => 0,
        }
    }
}

/// `/proc` state letter to the stream's state.
pub fn state_from_letter(c: char) -> wallclock_stream::State {
    use wallclock_stream::State;
    match c {
        'R' => State::R,
        'S' => State::S,
        'D' => State::D,
        _ => State::Other,
    }
}
