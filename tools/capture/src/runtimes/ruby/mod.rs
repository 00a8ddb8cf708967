//! Ruby frames with no flag (Ruby 3.1, as Debian 12 ships it; 3.3 as
//! Debian forky does, and 3.4: reader.rs's `Layout`): each
//! thread's control frames, read by the BPF side where a stack is taken
//! (bpf/ruby.bpf.h), named here from the live process (reader.rs) and put
//! above the `rb_vm_exec` native frames that ran them, as Python's go above
//! `_PyEval_EvalFrameDefault`.
//!
//! Whole stacks: a Ruby thread's 1 MiB VM stack is an alloca on its
//! machine stack, so the 64K copied from sp ends inside it and the
//! thread's outer frames (`thread_start_func_2`, `start_thread`, `clone3`)
//! lie past it. When the copy reaches the VM stack, the unwinder is given
//! the copy, the VM stack as zeros (no machine frame lies in it) and the
//! memory above it read from the live thread: what is there (the frames
//! that started the thread) does not change while the thread lives.
//!
//! YJIT's code (3.3 and 3.4 on x86-64) has no unwind table and no frame
//! pointer: its frame is stepped over by what its entry pushes
//! ([`yjit_frame`]) and named `rb::[YJIT code]`. YJIT keeps the control
//! frames as the interpreter does, so the Ruby frames it runs are read
//! the same way and go above the interpreter frame that entered it.
//!
//! One `rb_vm_exec` call runs the frames from the innermost up to the first
//! marked FINISH (pushed by C: a thread's block, a block yielded by a C
//! method): those runs go in order above the `rb_vm_exec` frames, innermost
//! on the innermost. A C method's frame is `rb::NAME`; an iseq's is
//! `rb::LABEL` with its file and first line.

pub mod reader;

use std::collections::HashMap;

use libbpf_rs::MapFlags;
use wallclock_stream::{Frame, NamedAddr, NAMED_ADDR_BASE};

use crate::event::WcEvent;
use crate::runtimes::{At, BpfMaps, Runtime, Step};
use reader::Vm;

/// bpf/ruby.bpf.h's marker of the slot that holds the VM stack's bounds.
const BOUNDS: u32 = 0x5242_5354;
/// ep[0] flags: a frame pushed by C (its run ends there); the frame type.
const FLAG_FINISH: u32 = 0x20;
const MAGIC_MASK: u32 = 0x7fff_0001;
const MAGIC_CFUNC: u32 = 0x5555_0001;
const MAGIC_DUMMY: u32 = 0x7999_0001;
/// How much of a thread's stack above its VM stack is read.
const ABOVE: usize = 32 << 10;

struct Proc {
    vm: Vm,
    addr: HashMap<(String, Option<u32>), u64>,
    names: Vec<NamedAddr>,
    /// The live memory above each thread's VM stack (by the VM stack's end).
    above: HashMap<u64, Vec<u8>>,
    /// Iseq or method entry -> its first words and its frame's address
    /// (None: not an iseq). One read checks an entry: an object freed by
    /// the GC and another made at its address is named anew.
    iseqs: HashMap<u64, ([u64; 3], Option<u64>)>,
}

/// The Ruby processes of a capture.
#[derive(Default)]
pub struct Ruby {
    procs: HashMap<u32, Proc>,
    not_ruby: HashMap<u32, String>,
    /// Frames that could not be read (marked, never misnamed).
    pub unread: u64,
    /// Stacks made whole past a VM stack.
    pub joined: u64,
    /// Stacks whose Ruby frames were named, and the time spent on them
    /// here (joining, naming, placing; the BPF walk is the kernel's).
    stacks: u64,
    read_ns: u64,
    /// Stacks waiting for the GVL (a `[GIL]` frame, as CPython's).
    gvl: u64,
    /// Frames of YJIT's code walked.
    yjit: u64,
    /// The joined stack's buffer and the ranges its last join wrote.
    buf: Vec<u8>,
    dirty: Vec<(usize, usize)>,
}

const UNREAD: &str = "rb::[unreadable frame]";
/// A frame of YJIT's code: the Ruby frames it runs are read from the VM
/// and go above the interpreter's frame that entered it.
const YJIT: &str = "rb::[YJIT code]";

/// The caller of a frame of YJIT's code at `at` (pc, sp, rbp): its return
/// address (into the interpreter, `vm`), sp and rbp. YJIT's entry
/// (Ruby 3.3 and 3.4, x86-64: `gen_entry_prologue`) pushes three registers
/// (`cpush` of CFP, EC and SP, 24 bytes) below the return address, 16
/// more around a few calls (`duphash`'s alignment), and leaves rbp as the
/// interpreter had it; with `--yjit-perf` it first pushes rbp and points
/// rbp at it, a frame pointer's frame. The return address must lie in the
/// interpreter's code, or no caller is taken (3.4 pushes its stack-temp
/// registers around a few calls too: such a frame is left to the
/// frame-pointer walk, as before).
fn yjit_frame(at: At, read: &dyn Fn(u64) -> Option<u64>, vm: &dyn Fn(u64) -> bool) -> Option<(u64, u64, u64)> {
    if cfg!(not(target_arch = "x86_64")) {
        return None;
    }
    if at.bp > at.sp && at.bp - at.sp <= 64 {
        if let (Some(ret), Some(bp)) = (read(at.bp + 8), read(at.bp)) {
            if vm(ret) {
                return Some((ret, at.bp + 16, bp));
            }
        }
    }
    [24, 40].into_iter().find_map(|off| read(at.sp + off).filter(|&r| vm(r)).map(|ret| (ret, at.sp + off + 8, at.bp)))
}

/// bpf/ruby.bpf.h's `struct wc_rbcfg`.
#[repr(C)]
struct RbCfg {
    modid: u64,
    dtpoff: u64,
    cfp_size: u32,
    ec_thread: u32,
    th_ractor: u32,
    th_waitq: u32,
    ractor_span: u32,
    pad: u32,
}

impl Runtime for Ruby {
    fn name(&self) -> &'static str {
        "ruby"
    }

    fn versions(&self) -> Vec<String> {
        reader::versions()
    }

    /// Find the Ruby processes among `pids` not seen yet and tell the
    /// BPF side where their execution contexts are. Whether one was
    /// added to `cfg`.
    fn refresh(&mut self, pids: &[u32], maps: &BpfMaps<'_>) -> bool {
        let cfg = maps.rb_cfg;
        let mut found = false;
        for &pid in pids {
            if self.procs.contains_key(&pid) {
                continue;
            }
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
            if self.not_ruby.get(&pid) == Some(&exe) {
                continue;
            }
            let Ok(vm) = Vm::find(pid) else {
                // A launched ruby has not loaded libruby yet: looked at
                // again at the next turn while its exe is ruby.
                if !exe.rsplit('/').next().unwrap_or("").starts_with("ruby") {
                    self.not_ruby.insert(pid, exe);
                }
                continue;
            };
            let l = vm.layout;
            let c = RbCfg { modid: vm.modid, dtpoff: vm.dtpoff, cfp_size: l.cfp_size, ec_thread: l.ec_thread, th_ractor: l.th_ractor, th_waitq: l.th_waitq, ractor_span: l.ractor_span, pad: 0 };
            // SAFETY: RbCfg is two u64s and six u32s, no padding.
            let b = unsafe { std::slice::from_raw_parts((&c as *const RbCfg).cast::<u8>(), std::mem::size_of::<RbCfg>()) };
            if cfg.update(&pid.to_ne_bytes(), b, MapFlags::ANY).is_err() {
                continue;
            }
            self.procs.insert(pid, Proc { vm, addr: HashMap::new(), names: Vec::new(), above: HashMap::new(), iseqs: HashMap::new() });
            found = true;
        }
        found
    }

    fn owns(&self, pid: u32) -> bool {
        self.procs.contains_key(&pid)
    }

    fn names(&self, pid: u32) -> Vec<NamedAddr> {
        self.procs.get(&pid).map(|p| p.names.clone()).unwrap_or_default()
    }

    /// The user stack to unwind for `e` of a Ruby process: its copy, or,
    /// where the copy ends inside a Ruby thread's VM stack, the copy
    /// joined to the live memory above that VM stack (see the module's
    /// doc).
    fn stack<'a>(&mut self, e: &'a WcEvent) -> Option<std::borrow::Cow<'a, [u8]>> {
        if !self.procs.contains_key(&e.pid) {
            return None;
        }
        let t0 = std::time::Instant::now();
        let s = self.join(e);
        self.read_ns += t0.elapsed().as_nanos() as u64;
        Some(s)
    }

    /// The buffer of a joined stack, back for the next join.
    fn recycle(&mut self, s: std::borrow::Cow<'_, [u8]>) {
        if let std::borrow::Cow::Owned(v) = s {
            self.buf = v;
        }
    }

    /// `native` (root first) with the Ruby frames of `e` put in.
    fn splice(&mut self, e: &WcEvent, native: Vec<u64>, in_file: &[bool]) -> Vec<u64> {
        let t0 = std::time::Instant::now();
        let v = self.place(e, native, in_file);
        self.read_ns += t0.elapsed().as_nanos() as u64;
        v
    }

    /// A frame of YJIT's code (code outside every file, in a Ruby
    /// process): see [`yjit_frame`]. Other code there (no caller found in
    /// the interpreter) is left to the frame-pointer walk.
    fn step(&mut self, pid: u32, at: At, read: &dyn Fn(u64) -> Option<u64>, _in_files: &dyn Fn(u64) -> bool) -> Step {
        let Some(p) = self.procs.get_mut(&pid) else { return Step::NotMine };
        let vm = |a: u64| p.vm.mapped.iter().any(|&(s, e)| a >= s && a < e);
        let Some((ret, sp, bp)) = yjit_frame(at, read, &vm) else { return Step::NotMine };
        self.yjit += 1;
        Step::Frame { ret, sp, bp, name: Some(p.address(YJIT.to_string(), None, None)) }
    }

    /// The frames this reader named (a Ruby frame, YJIT's code).
    fn is_code(&self, pid: u32, a: u64) -> bool {
        a >= NAMED_ADDR_BASE && self.procs.contains_key(&pid)
    }

    /// The counts of the stats record (none without a Ruby process).
    fn stats(&self) -> Vec<(String, u64)> {
        if self.procs.is_empty() {
            return Vec::new();
        }
        let v = [("ruby_stacks", self.stacks), ("ruby_read_ns", self.read_ns), ("ruby_joined_stacks", self.joined), ("ruby_unread_frames", self.unread), ("ruby_gvl_stacks", self.gvl), ("ruby_yjit_frames", self.yjit)];
        v.into_iter().map(|(k, n)| (k.to_string(), n)).collect()
    }
}

impl Ruby {

    fn join<'a>(&mut self, e: &'a WcEvent) -> std::borrow::Cow<'a, [u8]> {
        let copy = e.ustack_bytes();
        let Some(p) = self.procs.get_mut(&e.pid) else { return copy.into() };
        let b = e.py[e.py.len() - 1];
        let (lo, hi, end) = (b.code, b.instr, e.sp + copy.len() as u64);
        if b.flags != BOUNDS || lo <= e.sp || lo > end || hi <= end || hi - e.sp > 64 << 20 {
            return copy.into();
        }
        let above = p.above.entry(hi).or_insert_with(|| {
            let mut v = vec![0u8; ABOVE];
            let mut n = 0;
            while n < ABOVE && p.vm.read(hi + n as u64, &mut v[n..n + 4096]).is_ok() {
                n += 4096;
            }
            v.truncate(n);
            v
        });
        if above.is_empty() {
            return copy.into();
        }
        let gap = (hi - e.sp) as usize;
        // One buffer, its gap kept zero: what the last join wrote is
        // cleared, not the whole MiB made again (a fresh zeroed MiB per
        // stack cost more than the rest of the reader).
        let mut v = std::mem::take(&mut self.buf);
        for &(s, t) in &self.dirty {
            let t = t.min(v.len());
            if let Some(d) = v.get_mut(s..t) {
                d.fill(0);
            }
        }
        if v.len() < gap + above.len() {
            v.resize(gap + above.len(), 0);
        }
        v.truncate(gap + above.len());
        v[..copy.len()].copy_from_slice(copy);
        v[gap..].copy_from_slice(above);
        self.dirty = vec![(0, copy.len()), (gap, gap + above.len())];
        self.joined += 1;
        v.into()
    }

    fn place(&mut self, e: &WcEvent, native: Vec<u64>, in_file: &[bool]) -> Vec<u64> {
        let n = (e.py_n as usize).min(e.py.len() - 1);
        let Some(p) = self.procs.get_mut(&e.pid) else { return native };
        if n == 0 {
            return native;
        }
        let mut runs: Vec<Vec<u64>> = vec![Vec::new()];
        let mut unread = 0;
        for f in &e.py[..n] {
            let magic = f.flags & MAGIC_MASK;
            if magic != MAGIC_DUMMY && !(f.code == 0 && f.instr == 0) {
                let named = if f.code == 0 || magic == MAGIC_CFUNC { p.cfunc(f.instr).map(Some) } else { p.iseq(f.code) };
                match named {
                    Ok(Some(a)) => runs.last_mut().unwrap().push(a),
                    Ok(None) => {}
                    Err(()) => {
                        unread += 1;
                        runs.last_mut().unwrap().push(p.address(UNREAD.to_string(), None, None));
                    }
                }
            }
            if f.flags & FLAG_FINISH != 0 {
                runs.push(Vec::new());
            }
        }
        self.unread += unread;
        self.stacks += 1;
        runs.retain(|r| !r.is_empty());
        let (s, t) = p.vm.vm_exec;
        // The frame leafward of `rb_vm_exec` runs the instructions
        // (`vm_exec_core`, static in a stripped library): the runs go
        // right above it when it is libruby's.
        let in_lib = |a: u64| p.vm.mapped.iter().any(|&(s, e)| a >= s && a < e);
        let in_exec = |a: u64| a > s && a <= t;
        let exs: Vec<usize> = (0..native.len())
            .rev()
            .filter(|&i| in_exec(native[i]))
            .map(|i| if i + 1 < native.len() && in_lib(native[i + 1]) && !in_exec(native[i + 1]) { i + 1 } else { i })
            .collect();
        let mut native = native;
        // Off-CPU only: a sample of a thread just handed the lock (still
        // queued) runs, it does not wait.
        if e.kind == 0 && b_gvl(e) {
            // Above the wait itself: the leafmost libruby frame but the
            // condition/mutex wrappers (`rb_native_cond_wait`).
            let wrapper = |a: u64| p.vm.native_waits.iter().any(|&(s, e)| a > s && a <= e);
            if let Some(i) = (0..native.len()).rev().find(|&i| in_lib(native[i]) && !wrapper(native[i])) {
                let g = p.address(wallclock_stream::accounting::GIL_FRAME.to_string(), None, None);
                native.insert(i + 1, g);
                self.gvl += 1;
            }
        }
        let fallback = if native.first().is_some_and(|_| in_file.first() == Some(&false)) { Some(0) } else { None };
        crate::runtimes::splice::place(&native, &exs, crate::runtimes::splice::Rest::Above(fallback), runs)
    }
}

impl Proc {
    fn iseq(&mut self, iseq: u64) -> Result<Option<u64>, ()> {
        let head = self.vm.head(iseq).map_err(|_| ())?;
        if let Some(&(h, a)) = self.iseqs.get(&iseq) {
            if h == head {
                return Ok(a);
            }
        }
        let a = self.read_iseq(iseq)?;
        self.iseqs.insert(iseq, (head, a));
        Ok(a)
    }

    fn read_iseq(&mut self, iseq: u64) -> Result<Option<u64>, ()> {
        let Some((label, path, line)) = self.vm.iseq(iseq).map_err(|_| ())? else { return Ok(None) };
        let func = wallclock_stream::names::check(&format!("rb::{label}")).into_owned();
        let file = wallclock_stream::names::check(&path).into_owned();
        Ok(Some(self.address(func, Some(file), Some(line))))
    }

    fn cfunc(&mut self, me: u64) -> Result<u64, ()> {
        let head = self.vm.head(me).map_err(|_| ())?;
        if let Some(&(h, Some(a))) = self.iseqs.get(&me) {
            if h == head {
                return Ok(a);
            }
        }
        let a = self.read_cfunc(me)?;
        self.iseqs.insert(me, (head, Some(a)));
        Ok(a)
    }

    fn read_cfunc(&mut self, me: u64) -> Result<u64, ()> {
        let name = self.vm.method(me).map_err(|_| ())?;
        let func = wallclock_stream::names::check(&format!("rb::{name}")).into_owned();
        Ok(self.address(func, None, None))
    }

    fn address(&mut self, func: String, file: Option<String>, line: Option<u32>) -> u64 {
        let key = (format!("{func}\0{}", file.as_deref().unwrap_or("")), line);
        if let Some(&a) = self.addr.get(&key) {
            return a;
        }
        let a = address_of(&key.0, line);
        self.addr.insert(key, a);
        self.names.push(NamedAddr { addr: a, frame: Frame { file, line, ..Frame::named(func) } });
        a
    }
}

/// Whether the BPF walk found the thread waiting for the GVL.
fn b_gvl(e: &WcEvent) -> bool {
    let b = e.py[e.py.len() - 1];
    b.flags == BOUNDS && b.pad == 1
}

/// The address that stands for a frame (FNV-1a of its name, file and line,
/// 48 bits above [`NAMED_ADDR_BASE`]), the same in every tool's stream.
fn address_of(key: &str, line: Option<u32>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes().chain(line.map_or(-1, i64::from).to_le_bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    NAMED_ADDR_BASE | (h & 0x000f_ffff_ffff_fff0)
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// Memory of these (address, word) pairs.
    fn mem(words: Vec<(u64, u64)>) -> impl Fn(u64) -> Option<u64> {
        move |a| words.iter().find(|w| w.0 == a).map(|w| w.1)
    }

    #[test]
    fn yjit_frames_are_stepped_over_what_their_entry_pushed() {
        let vm = |a: u64| (0x5000..0x6000).contains(&a);
        let (sp, pc) = (0x7000_0000, 0x1234_0000);
        let at = |bp| At { pc, leaf: false, sp, bp };
        // CFP, EC and SP pushed, then the return into the interpreter; rbp
        // left as it was.
        let read = mem(vec![(sp, 0x9000_0000), (sp + 8, 0x9000_0008), (sp + 16, 0x9000_0010), (sp + 24, 0x5100)]);
        assert_eq!(yjit_frame(at(0x42), &read, &vm), Some((0x5100, sp + 32, 0x42)));
        // 16 more bytes pushed around a call.
        let read = mem(vec![(sp + 24, 0x9000_0000), (sp + 40, 0x5200)]);
        assert_eq!(yjit_frame(at(0x42), &read, &vm), Some((0x5200, sp + 48, 0x42)));
        // --yjit-perf: rbp points at the caller's rbp, pushed first.
        let bp = sp + 32;
        let read = mem(vec![(bp, 0x7000_1000), (bp + 8, 0x5300), (sp + 24, 0x5400)]);
        assert_eq!(yjit_frame(at(bp), &read, &vm), Some((0x5300, bp + 16, 0x7000_1000)));
        // No word returns into the interpreter: no caller taken.
        let read = mem(vec![(sp + 24, 0x1234), (sp + 40, 0x9999)]);
        assert_eq!(yjit_frame(at(0x42), &read, &vm), None);
    }
}
