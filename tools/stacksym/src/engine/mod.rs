//! Addresses to frames. One long-lived blazesym `Symbolizer`; addresses are
//! deduplicated per process (and for the kernel) and cached across chunks,
//! as ids of the stream's stack table (frames interned once).
//!
//! Where a user address is looked up, in this order:
//! 1. the stream's `Maps` record for the pid: (path, file offset) against the
//!    ELF file. It describes the process as it was when captured, so it stays
//!    right after the process exited or its pid was reused;
//! 2. the live process (`/proc/PID`, perf map for JIT code, vDSO);
//! 3. a snapshot of `/proc/PID/maps` taken earlier in this run, should the
//!    process have exited mid-stream;
//! 4. `/tmp/perf-PID.map`, which JIT runtimes leave behind;
//! 5. otherwise `module+0xOFFSET`, or `[unknown]+0xADDR` with no mapping.
//!
//! A file without symbols is looked up again in its separate debug file
//! when one is installed where debuggers look (see [`crate::debugfile`]).
//! The lookups themselves are in [`crate::resolve`]; frames left unnamed
//! are counted in [`crate::unnamed`].
//!
//! Its parts: the per-process caches ([`cache`]), JIT code ([`jit`]), the
//! kernel's text ([`ktext`]) and the processes' mappings ([`procmaps`]).

pub(crate) mod cache;
pub(crate) mod jit;
pub(crate) mod ktext;
pub(crate) mod procmaps;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::rc::Rc;

use blazesym::symbolize::Symbolizer;
use wallclock_stream::fasthash::{FastHash, FastMap};
use wallclock_stream::{Frame, Record, Stack, StackTable};

use crate::gil;
use procmaps::{Mapping, PerfMap, Strings};

/// Module name given to kernel frames.
pub const KERNEL_MODULE: &str = "[kernel]";

#[derive(Debug, Clone, Default)]
pub struct Options {
    pub no_inline: bool,
    pub no_demangle: bool,
    pub no_lines: bool,
    /// Never look at live processes: only Maps records and perf map files.
    pub no_live: bool,
    /// Symbolize stacks that already have frames again.
    pub force: bool,
    /// Drop raw addresses once symbolized.
    pub strip: bool,
    pub kallsyms: Option<PathBuf>,
    pub quiet: bool,
    /// Name in warnings (`stacksym` when empty).
    pub tool: &'static str,
}

/// The key of a process's address space: its pid, or for a later process
/// of a pid used again within the capture (`Stack::pgen`, `Maps::pgen`)
/// the pid with the generation above its 22 bits (a pid is below
/// 4,194,304, the kernel's largest `pid_max`): no live process has that
/// number, so such a process is named from its own `maps` record only,
/// never from /proc or the earlier process's mappings.
pub(crate) fn space_key(pid: u32, pgen: Option<u32>) -> u32 {
    match pgen.unwrap_or(0) {
        0 => pid,
        g => pid | g.min(1023) << 22,
    }
}

/// The pid part of a [`space_key`].
pub(crate) const PID_MASK: u32 = (1 << 22) - 1;

/// [`space_key`] of a stack's process.
pub(crate) fn space_pid(s: &Stack) -> u32 {
    space_key(s.pid, s.pgen)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Space {
    User(u32),
    Kernel,
}


pub struct Engine {
    pub(crate) symbolizer: Symbolizer,
    pub(crate) opts: Options,
    pub(crate) stream_maps: HashMap<u32, Vec<Mapping>>,
    /// Frames the capture named itself (`Maps::names`), per pid.
    pub(crate) named: HashMap<u32, HashMap<u64, Frame>>,
    pub(crate) snapshots: HashMap<u32, Vec<Mapping>>,
    /// The paths and build ids of `stream_maps` and `snapshots`.
    pub(crate) strings: Strings,
    pub(crate) perf_maps: HashMap<u32, Option<PerfMap>>,
    /// Does the file at this path still carry this build id?
    pub(crate) build_id_ok: HashMap<(Rc<str>, Rc<str>), bool>,
    /// Whether each mapped file may be opened: no link, a regular file
    /// (wallclock_stream::safe_open).
    pub(crate) file_ok: HashMap<Rc<str>, bool>,
    /// Frames of each address of each process, as ids of `table` (no
    /// clone of a `Frame` per record written), and its stacks met before;
    /// dropped once the process is no longer met (cache).
    pub(crate) spaces: FastMap<u32, cache::SpaceCache>,
    /// The same for kernel addresses (never dropped).
    pub(crate) kernel: cache::SpaceCache,
    /// Unnamed addresses counted by the dropped cache of each process.
    pub(crate) retired: FastMap<u32, cache::Counted>,
    /// Batches of stacks prepared so far.
    pub(crate) generation: u64,
    /// Addresses named since the table was last emptied.
    pub(crate) remembered: usize,
    /// Frames by (file id, file offset of the address, is a return
    /// address), for every process mapping the file (cache).
    pub(crate) files: FastMap<(u32, u64, bool), Rc<[u32]>>,
    pub(crate) file_ids: HashMap<String, u32>,
    /// Every frame and stack written: the stream's stack table.
    pub(crate) table: StackTable,
    /// `table`'s id of the `[GIL]` frame.
    pub(crate) gil_id: u32,
    /// A stack's frame ids, reused from record to record.
    scratch: Vec<u32>,
    pub(crate) warned: HashSet<String>,
    /// Our own vDSO as a file, made on first need (`None` inside: failed).
    pub(crate) vdso: Option<Option<crate::vdso::VdsoFile>>,
    /// Modules with unnamed frames, by the ids `cache::Addr::unnamed` holds.
    pub(crate) modules: Vec<Box<str>>,
    pub(crate) module_ids: HashMap<Box<str>, u32>,
    /// Why a module's frames had no name, as found while resolving.
    pub(crate) why: HashMap<String, String>,
    /// Counts not yet written to a trailer: `unnamed_*:MODULE`.
    pub(crate) pending: BTreeMap<String, u64>,
    /// Names marked as not text ([`wallclock_stream::names`]) already
    /// counted in a trailer.
    pub(crate) bad_names_told: u64,
    /// Time and events by module (`modules`) not yet in `pending`.
    pub(crate) unnamed_time: BTreeMap<u32, (u64, u64)>,
    pub(crate) warned_modules: HashSet<String>,
    /// The JIT runtime of each pid (jit).
    pub(crate) runtimes: HashMap<u32, jit::Runtime>,
    /// `table`'s ids of the cut-in-JIT-code markers (jit).
    pub(crate) cut_ids: [u32; 3],
    /// Stacks (table ids) cut in JIT code, and per pid the time of its
    /// cut stacks and of all its stacks, once one was cut (jit).
    pub(crate) cut_stacks: HashSet<u32, FastHash>,
    pub(crate) cut_time: HashMap<u32, (u64, u64)>,
    pub(crate) cut_warned: HashSet<u32>,
    /// Files of the last process named, kept open in the symbolizer (crate::evict).
    pub(crate) open_files: HashSet<Rc<str>>,
    /// Whether each file is big (crate::evict).
    pub(crate) file_sizes: HashMap<Rc<str>, bool>,
    /// The kernel's symbols read ahead ([`Engine::read_kallsyms_ahead`]).
    pub(crate) kallsyms: crate::kallsyms::Kallsyms,
    /// Kernel symbols the stream listed (its `ksyms` records: the
    /// capture's BPF programs), asked before kallsyms (ktext).
    pub(crate) stream_ksyms: Vec<wallclock_stream::Ksyms>,
    /// What kallsyms says each kernel address is, read on first need.
    pub(crate) ktext: Option<ktext::KernelText>,
}

impl Engine {
    pub fn new(opts: Options) -> Self {
        let symbolizer = Symbolizer::builder()
            .enable_inlined_fns(!opts.no_inline)
            .enable_demangling(!opts.no_demangle)
            .enable_code_info(!opts.no_lines)
            .build();
        let mut table = StackTable::default();
        let gil_id = table.frame_id(&gil::frame());
        let mut e = Engine {
            symbolizer,
            opts,
            stream_maps: HashMap::new(),
            named: HashMap::new(),
            snapshots: HashMap::new(),
            strings: Strings::default(),
            perf_maps: HashMap::new(),
            build_id_ok: HashMap::new(),
            file_ok: HashMap::new(),
            spaces: FastMap::default(),
            kernel: Default::default(),
            retired: FastMap::default(),
            generation: 0,
            remembered: 0,
            files: FastMap::default(),
            file_ids: HashMap::new(),
            table,
            gil_id,
            scratch: Vec::new(),
            warned: HashSet::new(),
            vdso: None,
            modules: Vec::new(),
            module_ids: HashMap::new(),
            why: HashMap::new(),
            pending: BTreeMap::new(),
            bad_names_told: 0,
            unnamed_time: BTreeMap::new(),
            warned_modules: HashSet::new(),
            runtimes: HashMap::new(),
            cut_ids: [0; 3],
            cut_stacks: HashSet::default(),
            cut_time: HashMap::new(),
            cut_warned: HashSet::new(),
            open_files: HashSet::new(),
            file_sizes: HashMap::new(),
            kallsyms: Default::default(),
            stream_ksyms: Vec::new(),
            ktext: None,
        };
        e.intern_cut_markers();
        e
    }

    /// Read `/proc/kallsyms` (unless `--kallsyms` names a file) on a
    /// thread of its own from now on (see [`crate::kallsyms`]).
    pub fn read_kallsyms_ahead(&mut self) {
        if self.opts.kallsyms.is_none() {
            self.kallsyms = crate::kallsyms::Kallsyms::start();
        }
    }

    pub fn options(&self) -> &Options {
        &self.opts
    }

    pub fn needs(&self, s: &Stack) -> bool {
        needs(s, self.opts.force)
    }

    /// Learn the maps records among `records`, then resolve the addresses
    /// of the stacks among them that need names.
    pub fn prepare_records(&mut self, records: &[Record]) {
        self.learn_maps(records);
        self.prepare_new(records, &[]);
    }

    /// Resolve the addresses of the stacks among `records` that need names
    /// and whose entry in `known` (one per record, from
    /// [`Engine::symbolized_known`]; missing entries are `None`) is `None`:
    /// stacks met before need no lookup. Learn the maps records first.
    pub fn prepare_new(&mut self, records: &[Record], known: &[Option<u32>]) {
        let todo: Vec<&Stack> = records
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Record::Stack(s) if known.get(i).copied().flatten().is_none() && self.needs(s) => Some(s),
                _ => None,
            })
            .collect();
        // Those `known` says were not met need not be looked up again.
        let looked_up = known.len() == records.len();
        self.prepare_stacks(todo.into_iter(), !looked_up);
    }

    /// Empty the caches and the table once [`CACHE_MAX`] addresses were
    /// named into it (table ids are handed out again: take none across
    /// this call).
    pub fn bound_memory(&mut self) {
        if self.remembered > CACHE_MAX {
            self.remembered = 0;
            self.drop_caches();
            self.table.clear();
            self.gil_id = self.table.frame_id(&gil::frame());
            self.intern_cut_markers();
            self.cut_stacks.clear();
        }
    }

    /// Resolve every address of `stacks` not already cached.
    pub fn prepare<'a>(&mut self, stacks: impl Iterator<Item = &'a Stack>) {
        self.prepare_stacks(stacks, true);
    }

    /// [`Engine::prepare`], stacks met before skipped where `check_known`.
    fn prepare_stacks<'a>(&mut self, stacks: impl Iterator<Item = &'a Stack>, check_known: bool) {
        self.bound_memory();
        self.next_batch();
        let mut user: HashMap<u32, Vec<(u64, bool)>> = HashMap::new();
        let mut kernel: Vec<(u64, bool)> = Vec::new();
        let mut seen: HashSet<(Space, u64, bool), FastHash> = HashSet::default();
        for s in stacks {
            // Met in this batch (kept), whether known or not.
            self.space_mut(Space::User(space_pid(s)));
            if check_known && self.known(s) {
                continue;
            }
            for (space, addrs) in [(Space::User(space_pid(s)), &s.ustack), (Space::Kernel, &s.kstack)] {
                let Some(cache) = self.space(space) else { continue };
                for (i, &a) in addrs.iter().enumerate() {
                    let key = (a, i + 1 < addrs.len());
                    if cache.addrs.contains_key(&key) || !seen.insert((space, a, key.1)) {
                        continue;
                    }
                    match space {
                        Space::User(pid) => user.entry(pid).or_default().push(key),
                        Space::Kernel => kernel.push(key),
                    }
                }
            }
        }
        let pids = self.by_image(user.keys().copied());
        let mut open = std::mem::take(&mut self.open_files);
        let plan = self.eviction_plan(&pids, &user, &mut open);
        for ((_, pid), drop) in pids.into_iter().zip(plan) {
            self.evict(&drop);
            let keys = &user[&pid];
            let frames = self.resolve_user(pid, keys);
            for (&(a, ret), ids) in keys.iter().zip(frames) {
                self.remember(Space::User(pid), a, ret, ids);
            }
        }
        self.open_files = open;
        // The kernel's last: its symbols are read meanwhile (crate::kallsyms).
        if !kernel.is_empty() {
            let frames = self.resolve_kernel(&kernel);
            for ((a, ret), f) in kernel.into_iter().zip(frames) {
                let ids = self.intern(&f);
                self.remember(Space::Kernel, a, ret, ids);
            }
        }
    }

    /// The frames of `s` (root first: the user part, then the kernel part)
    /// as ids of [`Engine::table`], appended to `out`. Call after
    /// [`Engine::prepare`] saw `s`.
    pub fn frame_ids(&self, s: &Stack, out: &mut Vec<u32>) {
        let blocked = gil::blocked(s);
        for (space, addrs) in [(Space::User(space_pid(s)), &s.ustack), (Space::Kernel, &s.kstack)] {
            let user = matches!(space, Space::User(_));
            let Some(cache) = self.space(space) else { continue };
            let addr_of = |i: usize| cache.addrs.get(&(*addrs.get(i)?, i + 1 < addrs.len()));
            let first = |i: usize| Some(self.table.frame(*addr_of(i)?.ids.first()?));
            // A stack cut in JIT code says so at its root (jit),
            // instead of the capture's plainer `[truncated]`.
            let mut skip = 0;
            if let Space::User(pid) = space {
                let truncated = first(0).is_some_and(jit::is_truncated);
                if let Some(m) = first(truncated as usize).and_then(|root| self.cut_marker(pid, root)) {
                    out.push(m);
                    skip = truncated as usize;
                }
            }
            // Each address looked up once, the next one's frames (for
            // the `[GIL]` frame) kept for its turn: three lookups an
            // address, mostly cache misses, were a tenth of stacksym's run.
            // Only an address whose first frame is in CPython is looked at.
            let gil = user && blocked;
            let mut next = addr_of(skip);
            for i in skip..addrs.len() {
                let Some(a) = std::mem::replace(&mut next, addr_of(i + 1)) else { continue };
                let frame = |a: &cache::Addr| a.ids.first().map(|&f| self.table.frame(f));
                if gil && a.cpython && frame(a).is_some_and(|f| gil::before(f, next.and_then(frame))) {
                    out.push(self.gil_id);
                }
                out.extend_from_slice(&a.ids);
            }
        }
    }

    /// The id in [`Engine::table`] of the stack of `s`'s frames (see
    /// [`Engine::frame_ids`]).
    pub fn stack_id(&mut self, s: &Stack) -> u32 {
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        self.frame_ids(s, &mut ids);
        let cut = ids.first().is_some_and(|f| self.cut_ids.contains(f));
        let id = self.table.stack_id(&ids);
        if cut {
            self.cut_stacks.insert(id);
        }
        self.scratch = ids;
        id
    }

    /// The id in [`Engine::table`] of a stack of frames named elsewhere
    /// (a stream symbolized before).
    pub fn stack_of(&mut self, frames: &[Frame]) -> u32 {
        self.table.stack_of(frames)
    }

    /// Every frame and stack named so far, for the stream's stack table.
    pub fn table(&self) -> &StackTable {
        &self.table
    }

    /// The frames of `s`, root first (see [`Engine::frame_ids`]).
    pub fn frames(&self, s: &Stack) -> Vec<Frame> {
        let mut ids = Vec::new();
        self.frame_ids(s, &mut ids);
        ids.into_iter().map(|f| self.table.frame(f).clone()).collect()
    }

    pub(crate) fn warn(&mut self, what: String) {
        if !self.opts.quiet && self.warned.insert(what.clone()) {
            let tool = if self.opts.tool.is_empty() { "stacksym" } else { self.opts.tool };
            eprintln!("{tool}: warning: {what}");
        }
    }
}

/// Whether `s` has addresses to name: it has no frames, or `force`.
pub(crate) fn needs(s: &Stack, force: bool) -> bool {
    (!s.ustack.is_empty() || !s.kstack.is_empty()) && (s.frames.is_empty() || force)
}

/// Addresses cached before the cache is emptied (bounds memory on huge,
/// diverse inputs; a few hundred bytes each).
const CACHE_MAX: usize = 1 << 20;
