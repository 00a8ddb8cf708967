//! One Go process's goroutines, read from outside (process_vm_readv) at
//! one tick: `runtime.allgs` → each g's status, wait reason and saved
//! registers → its stack, unwound as the capture unwinds on-CPU stacks
//! (`Unwind`: the binary's .debug_frame, frame pointers where none).

use std::rc::Rc;

use rustc_hash::{FxHashMap, FxHashSet};

use super::layout::Layout;
use crate::unwind::{Unwind, TRUNCATED, TRUNCATED_ADDR};
use crate::samplers::tally::Seen;

/// A goroutine's stack is copied from its saved sp up to this much: Go
/// keeps arrays that do not escape on the stack (a 64K buffer), and a
/// parked goroutine's stack is copied once (see `cache`).
const MAX_STACK: u64 = 1 << 20;
const G_DEAD_OR_IDLE: [&str; 3] = ["dead", "idle", "moribund_unused"];
const SCAN_BIT: u32 = 0x1000;

pub fn read(pid: u32, addr: u64, buf: &mut [u8]) -> bool {
    if buf.is_empty() {
        return true;
    }
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: one local iovec over `buf`, which outlives the call.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    n == buf.len() as isize
}

/// Bytes between two g's read through rather than split into two reads,
/// and the most one read spans.
const GAP: u64 = 4096;
const MAX_SPAN: u64 = 256 << 10;

/// What [`read_many`] read: the ranges, and where in them each g is.
struct Many {
    bufs: Vec<Vec<u8>>,
    /// (buffer, offset) of each address; None: it could not be read.
    at: Vec<Option<(usize, usize)>>,
    len: usize,
}

impl Many {
    fn get(&self, i: usize) -> Option<&[u8]> {
        let (b, o) = self.at[i]?;
        self.bufs[b].get(o..o + self.len)
    }
}

/// `len` bytes at each of `addrs` (see [`Many::get`]).
/// The g's lie side by side in the heap's spans: sorted and read as the
/// few ranges they fill (92 for 2,000 g's of a 10k-goroutine program),
/// as one iovec each. An iovec per g (2,000 a tick) cost the kernel a
/// page lookup per g: 1.3 ms against 0.3 ms for the ranges. The g's are
/// looked at in the ranges' buffers, not copied out one by one.
fn read_many(pid: u32, addrs: &[u64], len: usize) -> Many {
    let mut order: Vec<usize> = (0..addrs.len()).collect();
    order.sort_unstable_by_key(|&i| addrs[i]);
    let mut spans: Vec<(u64, u64, Vec<usize>)> = Vec::new();
    for i in order {
        let (a, e) = (addrs[i], addrs[i].saturating_add(len as u64));
        match spans.last_mut() {
            Some(s) if a <= s.1.saturating_add(GAP) && e.saturating_sub(s.0) <= MAX_SPAN => {
                s.1 = s.1.max(e);
                s.2.push(i);
            }
            _ => spans.push((a, e, vec![i])),
        }
    }
    let ranges: Vec<(u64, usize)> = spans.iter().map(|s| (s.0, (s.1 - s.0) as usize)).collect();
    let mut out = Many { bufs: Vec::with_capacity(spans.len()), at: vec![None; addrs.len()], len };
    for ((start, _, members), buf) in spans.iter().zip(read_ranges(pid, &ranges)) {
        match buf {
            Some(b) => {
                let k = out.bufs.len();
                out.bufs.push(b);
                for &i in members {
                    out.at[i] = Some((k, (addrs[i] - start) as usize));
                }
            }
            // A range with a hole: its g's one by one.
            None => {
                for &i in members {
                    let mut b = vec![0u8; len];
                    if read(pid, addrs[i], &mut b) {
                        out.at[i] = Some((out.bufs.len(), 0));
                        out.bufs.push(b);
                    }
                }
            }
        }
    }
    out
}

/// Each range, in few system calls (up to 1024 iovecs each).
fn read_ranges(pid: u32, ranges: &[(u64, usize)]) -> Vec<Option<Vec<u8>>> {
    let mut bufs: Vec<Vec<u8>> = ranges.iter().map(|&(_, n)| vec![0u8; n]).collect();
    let mut ok = vec![false; ranges.len()];
    let mut i = 0;
    while i < ranges.len() {
        let n = (ranges.len() - i).min(1024);
        let local: Vec<libc::iovec> = bufs[i..i + n].iter_mut().map(|b| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() }).collect();
        let remote: Vec<libc::iovec> = ranges[i..i + n].iter().map(|&(a, l)| libc::iovec { iov_base: a as *mut libc::c_void, iov_len: l }).collect();
        // SAFETY: each local iovec is a distinct buffer of `bufs`, which
        // outlives the call.
        let got = unsafe { libc::process_vm_readv(pid as libc::pid_t, local.as_ptr(), n as libc::c_ulong, remote.as_ptr(), n as libc::c_ulong, 0) };
        // It stops at the first byte it cannot read: the ranges read
        // whole count, the one it stopped in is read again by itself, the
        // rest in the next call.
        let mut left = usize::try_from(got).unwrap_or(0);
        let mut whole = 0;
        while whole < n && left >= ranges[i + whole].1 {
            left -= ranges[i + whole].1;
            whole += 1;
        }
        ok[i..i + whole].iter_mut().for_each(|o| *o = true);
        i += whole;
        if whole < n {
            ok[i] = read(pid, ranges[i].0, &mut bufs[i]);
            i += 1;
        }
    }
    bufs.into_iter().zip(ok).map(|(b, ok)| ok.then_some(b)).collect()
}

fn u64_at(b: &[u8], off: u64) -> u64 {
    b.get(off as usize..off as usize + 8).map_or(0, |s| u64::from_le_bytes(s.try_into().unwrap()))
}

/// What a g's status (Go's `_Gwaiting`...) says, decided once per
/// process from its binary's constants (no string compared per g).
#[derive(Clone)]
enum Status {
    /// dead, idle: not a goroutine to count.
    Skip,
    /// Waiting: its wait reason names it.
    Waiting,
    /// In a system call: registers saved at its entry.
    Syscall(Rc<str>),
    /// Running (or its stack being copied): its registers are its thread's.
    Running(Rc<str>),
    /// Runnable, preempted...: registers saved in g.sched.
    Parked(Rc<str>, bool),
}

pub struct GoProcess {
    pub pid: u32,
    pub layout: Rc<Layout>,
    /// Load bias (a PIE's), added to link-time addresses.
    pub bias: u64,
    /// Where to start the next tick's subset, when it is one.
    cursor: usize,
    /// Unwound stacks by (g, goid, pc, sp): a parked goroutine's does not
    /// change, and is unwound once.
    cache: FxHashMap<(u64, u64, u64, u64), Rc<str>>,
    /// The stack each goroutine last parked or was preempted with: a
    /// running one's registers are its thread's, not in its g.
    last: FxHashMap<(u64, u64), Rc<str>>,
    /// By status value (its scan bit cleared); None: a value not known.
    statuses: Vec<Option<Status>>,
    /// `[chan receive]`... by wait reason (a byte).
    reasons: Vec<Rc<str>>,
    /// Every stack text met (see `intern`).
    stacks: FxHashSet<Rc<str>>,
    pub unreadable: u64,
}

/// Statuses above this are not looked up (Go's are below 16).
const MAX_STATUS: u64 = 256;

impl GoProcess {
    pub fn new(pid: u32, layout: Rc<Layout>, bias: u64) -> GoProcess {
        let text = |s: &str| -> Rc<str> { Rc::from(format!("[{s}]")) };
        let mut statuses = vec![None; MAX_STATUS as usize];
        for (&v, s) in layout.states.iter().filter(|e| *e.0 < MAX_STATUS) {
            statuses[v as usize] = Some(match s.as_str() {
                s if G_DEAD_OR_IDLE.contains(&s) => Status::Skip,
                "waiting" => Status::Waiting,
                "syscall" => Status::Syscall(text(s)),
                "running" | "copystack" => Status::Running(text(s)),
                s => Status::Parked(text(s), s == "preempted"),
            });
        }
        let waiting = text("waiting");
        let reasons = (0..256u64)
            .map(|r| layout.reasons.get(&r).filter(|s| !s.is_empty()).map_or_else(|| waiting.clone(), |s| text(s)))
            .collect();
        GoProcess { pid, layout, bias, cursor: 0, cache: FxHashMap::default(), last: FxHashMap::default(), statuses, reasons, stacks: FxHashSet::default(), unreadable: 0 }
    }

    /// The goroutines of this tick (at most `budget`, a rotating subset
    /// when there are more) and how many there were in all; None when the
    /// process cannot be read (gone).
    pub fn tick(&mut self, unwind: &mut Unwind, budget: usize) -> Option<(Vec<Seen>, usize)> {
        let (pid, l) = (self.pid, self.layout.clone());
        let mut hdr = [0u8; 16];
        let mut len = [0u8; 8];
        if !read(pid, l.allgs + self.bias, &mut hdr) || !read(pid, l.allglen + self.bias, &mut len) {
            return None;
        }
        let (ptr, slice_len) = (u64_at(&hdr, 0), u64_at(&hdr, 8));
        let n = (u64::from_le_bytes(len).min(slice_len) as usize).min(1 << 24);
        let (first, take) = if n > budget { (self.cursor % n, budget) } else { (0, n) };
        self.cursor = first + take;
        let mut ptrs = vec![0u8; n * 8];
        if !read(pid, ptr, &mut ptrs) {
            self.unreadable += 1;
            return Some((Vec::new(), n));
        }
        // Reading them all, the maps are made anew (goroutines that died
        // leave them); reading a subset, they are kept and added to.
        let full = take == n;
        if !full && self.last.len() > 4 * n {
            // A subset: the others' stay (the next ticks read them), until
            // goroutines that died would pile up.
            self.last.clear();
            self.cache.clear();
        }
        let mut fresh = full.then(|| (FxHashMap::with_capacity_and_hasher(self.cache.len(), Default::default()), FxHashMap::with_capacity_and_hasher(self.last.len(), Default::default())));
        let mut out = Vec::with_capacity(take);
        let gps: Vec<u64> = (0..take).map(|k| u64_at(&ptrs, (((first + k) % n) * 8) as u64)).filter(|&gp| gp != 0).collect();
        let many = read_many(pid, &gps, l.g.len as usize);
        for (i, &gp) in gps.iter().enumerate() {
            let Some(g) = many.get(i) else {
                self.unreadable += 1;
                continue;
            };
            let status = (u64_at(g, l.g.atomicstatus) as u32) & !SCAN_BIT;
            let Some(Some(state)) = self.statuses.get(status as usize) else {
                self.unreadable += 1;
                continue;
            };
            let goid = u64_at(g, l.g.goid);
            let (what, waiting, (pc, sp, bp)) = match state {
                Status::Skip => continue,
                Status::Waiting => {
                    let r = g.get(l.g.waitreason as usize).copied().unwrap_or(0);
                    (self.reasons[r as usize].clone(), true, (u64_at(g, l.g.sched_pc), u64_at(g, l.g.sched_sp), u64_at(g, l.g.sched_bp)))
                }
                Status::Syscall(t) => (t.clone(), false, (u64_at(g, l.g.syscallpc), u64_at(g, l.g.syscallsp), 0)),
                Status::Running(t) => (t.clone(), false, (0, 0, 0)),
                Status::Parked(t, w) => (t.clone(), *w, (u64_at(g, l.g.sched_pc), u64_at(g, l.g.sched_sp), u64_at(g, l.g.sched_bp))),
            };
            let key = (gp, goid, pc, sp);
            let stack = match (self.cache.get(&key), self.last.get(&(gp, goid))) {
                (_, Some(s)) if pc == 0 => s.clone(),
                (_, None) if pc == 0 => self.started_in(u64_at(g, l.g.startpc)),
                (Some(s), _) => s.clone(),
                (None, _) => self.unwound(unwind, pc, sp, bp, u64_at(g, l.g.stack_hi)),
            };
            let (cache, last) = match fresh.as_mut() {
                Some((c, l)) => (c, l),
                None => (&mut self.cache, &mut self.last),
            };
            if pc != 0 {
                cache.insert(key, stack.clone());
            }
            last.insert((gp, goid), stack.clone());
            out.push(Seen { id: goid, waiter: 0, name: None, what, waiting, stack });
        }
        if let Some((cache, last)) = fresh {
            self.cache = cache;
            self.last = last;
        }
        Some((out, n))
    }

    fn name(&self, a: u64) -> String {
        if a == TRUNCATED_ADDR {
            return TRUNCATED.into();
        }
        // Return addresses: the call is the byte before.
        a.checked_sub(self.bias + 1).and_then(|a| self.layout.func(a)).map_or_else(|| format!("[unknown {a:#x}]"), str::to_string)
    }

    /// A running goroutine never seen parked: named by the function it
    /// was started with, as `goexit` began it.
    fn started_in(&mut self, startpc: u64) -> Rc<str> {
        let f = self.name(startpc + 1);
        self.intern(wallclock_stream::folded::stack_text(&["runtime.goexit", &f], &[]))
    }

    fn unwound(&mut self, unwind: &mut Unwind, pc: u64, sp: u64, bp: u64, hi: u64) -> Rc<str> {
        let mut stack = vec![0u8; hi.saturating_sub(sp).min(MAX_STACK) as usize];
        if sp == 0 || !read(self.pid, sp, &mut stack) {
            stack.clear();
        }
        let addrs = unwind.unwind(self.pid, pc, sp, bp, &stack);
        let names: Vec<String> = addrs.iter().map(|&a| self.name(a)).collect();
        self.intern(wallclock_stream::folded::stack_text(&names, &[]))
    }

    /// One string per distinct stack, whichever goroutines unwound to it:
    /// the tally groups a tick's goroutines by the strings' addresses (10k
    /// goroutines parked at one place are then one line to build, not 10k).
    fn intern(&mut self, text: String) -> Rc<str> {
        if let Some(s) = self.stacks.get(text.as_str()) {
            return s.clone();
        }
        let s: Rc<str> = Rc::from(text);
        self.stacks.insert(s.clone());
        s
    }
}
