//! The caller of a leaf the unwind tables do not cover (hand-written
//! assembly: OpenBLAS's `dgemm_kernel_HASWELL`, about half of a matmul
//! thread's samples), looked for as Breakpad's stack walker does: a word
//! above sp that returns just past a call instruction.
//!
//! Such a frame also holds return addresses of earlier, deeper calls,
//! left where they were written (OpenBLAS's kernel aligns rsp down by
//! 28K and reads little of what lies between). Their walk reaches the
//! stack's start as well as the true one's: the earlier stack shared its
//! callers (`_dl_map_object_from_fd;_dl_new_object;__libc_malloc;
//! _int_malloc;dgemm_kernel_HASWELL` for 27-45% of a matmul thread's
//! time). So a word counts only when the call before it could have
//! entered the leaf's function: a direct call's target, or what the GOT
//! slot of the PLT entry or of a `call *slot(%rip)` it went through holds
//! in the process now, must be the start of the function holding the
//! leaf (no function symbol between it and the leaf). A call through a
//! register or other memory names no target and is taken on its own. A
//! leaf its caller reached by a tail call (a jump from the function it
//! called) fails the check: its stack is cut, marked `[truncated]`,
//! rather than given a caller that never called it.
//!
//! The scan runs only for a leaf the file's unwind table does not cover
//! ([`Code::has_rule`]). A leaf with a rule whose walk stopped (at JIT
//! code with no table: opcache's, V8's, BEAM's) is cut there and marked:
//! a scan from it took a stale return address left by an earlier call for
//! the caller of opcache's JIT code (`zend_execute;__GI___clock_nanosleep`
//! for the whole of a PHP function's sleep, with `JIT$nap`, `zif_usleep`,
//! `usleep` and `__nanosleep` dropped and nothing marked).

use std::collections::HashMap;
use std::sync::Arc;

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

use crate::elf::Bytes;
use crate::textpages::{Pages, Text};

/// A file's `.eh_frame` and `.eh_frame_hdr`, each with its SVMA.
pub struct Tables {
    pub eh_frame: (u64, Bytes),
    pub hdr: (u64, Bytes),
}

/// What the scan checks of one file, at the file's own addresses
/// (SVMAs). Its .text is not copied: the bytes are read through
/// [`Pages`] from the file (textpages.rs says why).
pub struct FileCode {
    text_svma: u64,
    /// Sorted starts of the file's function symbols (.symtab and .dynsym).
    funcs: Vec<u64>,
    /// Each PLT section's first SVMA and bytes (a few KB: copied).
    plts: Vec<(u64, Arc<[u8]>)>,
    /// Its unwind table, searched through its sorted index.
    tables: Option<Tables>,
}

impl FileCode {
    pub fn parse(obj: &object::File, tables: Option<Tables>) -> Option<FileCode> {
        let text = obj.section_by_name(".text")?;
        let bytes = |s: &object::Section| s.data().ok().map(Arc::<[u8]>::from);
        let mut funcs: Vec<u64> = obj
            .symbols()
            .chain(obj.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
            .map(|s| s.address())
            .collect();
        funcs.sort_unstable();
        funcs.dedup();
        let plts = [".plt", ".plt.sec", ".plt.got"]
            .iter()
            .filter_map(|n| obj.section_by_name(n))
            .filter_map(|s| Some((s.address(), bytes(&s)?)))
            .collect();
        Some(FileCode { text_svma: text.address(), funcs, plts, tables })
    }

    /// Whether the unwind table has a rule for `svma`; None when there is
    /// no indexed table to tell (the scan then runs, as before there was
    /// this check).
    fn has_rule(&self, svma: u64) -> Option<bool> {
        use gimli::{BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, UnwindSection};
        let t = self.tables.as_ref()?;
        let bases = BaseAddresses::default().set_eh_frame_hdr(t.hdr.0).set_eh_frame(t.eh_frame.0).set_text(self.text_svma);
        let hdr = EhFrameHdr::new(&t.hdr.1, LittleEndian).parse(&bases, 8).ok()?;
        let eh = EhFrame::new(&t.eh_frame.1, LittleEndian);
        match hdr.table()?.fde_for_address(&eh, &bases, svma, EhFrame::cie_from_offset) {
            Ok(_) => Some(true),
            Err(gimli::Error::NoUnwindInfoForAddress) => Some(false),
            Err(_) => None,
        }
    }
}

/// What the instruction before a return address is.
#[derive(Debug, PartialEq)]
enum Call {
    /// `call rel32`: its target.
    Direct(u64),
    /// `call *disp(%rip)`: the slot holding its target.
    Slot(u64),
    /// `call` through a register or other memory.
    Unknown,
}

/// The code of the files one process maps, at the addresses it maps them.
#[derive(Default)]
pub struct Code {
    /// Load bias (AVMA - SVMA), what is checked and the .text of each file.
    files: Vec<(u64, Arc<FileCode>, Text)>,
    /// GOT slots read, by AVMA, once they hold a target outside the PLT
    /// (bound: they keep it).
    got: HashMap<u64, u64>,
}

impl Code {
    pub fn add(&mut self, bias: u64, code: Arc<FileCode>, text: Text) {
        self.files.push((bias, code, text));
    }

    /// The file whose .text holds `a`, its bias, `a`'s offset in it and
    /// the .text.
    fn text_at(&self, a: u64) -> Option<(&FileCode, u64, u64, &Text)> {
        self.files.iter().find_map(|(bias, c, t)| {
            let off = a.wrapping_sub(c.text_svma.wrapping_add(*bias));
            (off < t.len()).then_some((&**c, *bias, off, t))
        })
    }

    /// Whether the unwind table of the file whose .text holds `ip` has a
    /// rule for it (None: no table that can tell, or no such file).
    pub fn has_rule(&self, ip: u64) -> Option<bool> {
        let (c, bias, _, _) = self.text_at(ip)?;
        c.has_rule(ip.wrapping_sub(bias))
    }

    /// Whether `a` lies in the .text of a file.
    pub fn in_text(&self, a: u64) -> bool {
        self.text_at(a).is_some()
    }

    /// The PLT entry at `a`, as the GOT slot its `jmp *disp(%rip)` reads
    /// (after an `endbr64; bnd` in .plt.sec).
    fn plt_slot(&self, a: u64) -> Option<u64> {
        self.files.iter().find_map(|(bias, c, _)| {
            c.plts.iter().find_map(|(svma, b)| {
                let off = a.wrapping_sub(svma.wrapping_add(*bias)) as usize;
                let entry = b.get(off..(off + 16).min(b.len()))?;
                let k = entry.windows(2).position(|w| w == [0xff, 0x25])?;
                let disp = i32::from_le_bytes(entry.get(k + 2..k + 6)?.try_into().ok()?);
                Some(a.wrapping_add((k + 6) as u64).wrapping_add(disp as i64 as u64))
            })
        })
    }

    /// The call that returns to `r`, if the instruction before `r` is one.
    fn call_before(&self, r: u64, pages: &mut Pages) -> Option<Call> {
        let (_, _, i, t) = self.text_at(r)?;
        if back(pages, t, i, 5) == Some(0xe8) {
            let to = r.wrapping_add(rel32(pages, t, i, 4)? as i64 as u64);
            // Only a target in code: the bytes may end another call.
            if self.in_text(to) || self.plt_slot(to).is_some() {
                return Some(Call::Direct(to));
            }
        }
        if back(pages, t, i, 6) == Some(0xff) && back(pages, t, i, 5) == Some(0x15) {
            return Some(Call::Slot(r.wrapping_add(rel32(pages, t, i, 4)? as i64 as u64)));
        }
        self.indirect_before(r, pages).then_some(Call::Unknown)
    }

    /// Whether `r` follows a `call` through a register or memory (0xff /2,
    /// with or without a prefix or displacement).
    fn indirect_before(&self, r: u64, pages: &mut Pages) -> bool {
        let Some((_, _, i, t)) = self.text_at(r) else { return false };
        let modrm_is_call = |m: Option<u8>| m.is_some_and(|m| (m >> 3) & 7 == 2);
        [2, 3, 6, 7].into_iter().any(|n| back(pages, t, i, n) == Some(0xff) && modrm_is_call(back(pages, t, i, n - 1)))
    }

    /// The start of the function holding `ip` as far as the symbols tell:
    /// the last function symbol at or below it (its .text's start when
    /// none is).
    fn function_floor(&self, ip: u64) -> Option<u64> {
        let (c, bias, _, _) = self.text_at(ip)?;
        let svma = ip.wrapping_sub(bias);
        let k = c.funcs.partition_point(|&f| f <= svma);
        let floor = if k > 0 { c.funcs[k - 1].max(c.text_svma) } else { c.text_svma };
        Some(floor.wrapping_add(bias))
    }

    /// What GOT slot `slot` of process `pid` holds now.
    fn slot_value(&mut self, pid: u32, slot: u64) -> Option<u64> {
        if let Some(&v) = self.got.get(&slot) {
            return Some(v);
        }
        let v = read_word(pid, slot)?;
        // Lazy binding points an unbound slot back into its PLT entry.
        if self.plt_slot(v).is_none() {
            self.got.insert(slot, v);
        }
        Some(v)
    }

    /// Whether the call returning to `r` may have entered the function
    /// holding `ip`.
    fn may_enter(&mut self, pid: u32, r: u64, ip: u64, pages: &mut Pages) -> bool {
        let target = match self.call_before(r, pages) {
            None => return false,
            Some(Call::Unknown) => return true,
            Some(Call::Direct(t)) => match self.plt_slot(t) {
                Some(slot) => self.slot_value(pid, slot),
                None => Some(t),
            },
            Some(Call::Slot(slot)) => match self.slot_value(pid, slot) {
                Some(t) => Some(t),
                // No such memory: the bytes end a shorter indirect call.
                None => return self.indirect_before(r, pages),
            },
        };
        match (target, self.function_floor(ip)) {
            (Some(t), Some(floor)) => t >= floor && t <= ip,
            _ => false,
        }
    }

    /// The words of `stack` (copied from `sp`) that may return to the
    /// caller of the leaf at `ip`: slot and value, nearest first.
    pub fn scan(&mut self, pid: u32, ip: u64, sp: u64, stack: &[u8], pages: &mut Pages) -> Vec<(u64, u64)> {
        let words = stack.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().unwrap()));
        let mut out = Vec::new();
        for (k, r) in words.enumerate() {
            if self.may_enter(pid, r, ip, pages) {
                out.push((sp + 8 * k as u64, r));
            }
        }
        out
    }
}

/// The byte `n` before offset `i` of `t`.
fn back(pages: &mut Pages, t: &Text, i: u64, n: u64) -> Option<u8> {
    pages.byte(t, i.checked_sub(n)?)
}

/// The little-endian i32 that starts `n` bytes before offset `i` of `t`.
fn rel32(pages: &mut Pages, t: &Text, i: u64, n: u64) -> Option<i32> {
    let mut b = [0u8; 4];
    for (k, x) in b.iter_mut().enumerate() {
        *x = back(pages, t, i, n - k as u64)?;
    }
    Some(i32::from_le_bytes(b))
}

/// A word of another process's memory.
fn read_word(pid: u32, addr: u64) -> Option<u64> {
    let mut buf = [0u8; 8];
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: 8 };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: 8 };
    // SAFETY: one local buffer of 8 bytes, written by the kernel; the
    // remote range is only read.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    (n == 8).then(|| u64::from_le_bytes(buf))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// GOT slots, in this process's memory (the scan reads them from it).
    static SLOT_A: AtomicU64 = AtomicU64::new(0);
    static SLOT_B: AtomicU64 = AtomicU64::new(0);
    static PLT_GOT: AtomicU64 = AtomicU64::new(0);

    /// `call rel32` at SVMA `at` to `to`, written into `text` (SVMA 0x1000).
    fn call(text: &mut [u8], at: u64, to: u64) {
        let i = (at - 0x1000) as usize;
        text[i] = 0xe8;
        text[i + 1..i + 5].copy_from_slice(&((to as i64 - (at + 5) as i64) as i32).to_le_bytes());
    }

    /// A file with functions A (0x1000), B (0x1100), C (0x1200), calls
    /// from C to each way, and a PLT entry for A; the leaf is in A.
    #[test]
    fn only_calls_that_may_have_entered_the_leaf_are_kept() {
        // AVMA = SVMA + bias, near the slots: `call *disp(%rip)` reaches them.
        let bias = (&SLOT_A as *const AtomicU64 as u64 & !0xfff) - 0x10000;
        let avma = |svma: u64| svma + bias;
        let mut text = vec![0x90u8; 0x300];
        call(&mut text, 0x1200, 0x1000);
        call(&mut text, 0x1210, 0x1100);
        text[0x220..0x222].copy_from_slice(&[0xff, 0xd0]); // call *%rax
        let rip_call = |text: &mut Vec<u8>, at: u64, slot: &AtomicU64| {
            let disp = slot as *const AtomicU64 as i64 - avma(at + 6) as i64;
            let i = (at - 0x1000) as usize;
            text[i..i + 2].copy_from_slice(&[0xff, 0x15]);
            text[i + 2..i + 6].copy_from_slice(&(disp as i32).to_le_bytes());
        };
        rip_call(&mut text, 0x1230, &SLOT_A);
        rip_call(&mut text, 0x1240, &SLOT_B);
        call(&mut text, 0x1250, 0x3000);
        // `call *%rax` after bytes that read as `call *disp(%rip)` with a
        // slot 790 MB below, where nothing is mapped.
        text[0x260..0x266].copy_from_slice(&[0xff, 0x15, 0x00, 0x00, 0xff, 0xd0]);
        // .plt.sec's entry: endbr64; bnd jmp *disp(%rip).
        let mut plt = vec![0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0, 0, 0, 0, 0x90, 0x90, 0x90, 0x90, 0x90];
        let disp = &PLT_GOT as *const AtomicU64 as i64 - avma(0x3000 + 11) as i64;
        plt[7..11].copy_from_slice(&(disp as i32).to_le_bytes());
        SLOT_A.store(avma(0x1000), Ordering::SeqCst);
        SLOT_B.store(avma(0x1100), Ordering::SeqCst);
        PLT_GOT.store(avma(0x1000), Ordering::SeqCst);
        let file = FileCode { text_svma: 0x1000, funcs: vec![0x1000, 0x1100, 0x1200], plts: vec![(0x3000, plt.into())], tables: None };
        let mut code = Code::default();
        code.add(bias, Arc::new(file), Text::Mem(crate::elf::Bytes::Owned(text.into())));
        let mut pages = Pages::default();

        // Return addresses: to A's caller, B's, through %rax, through a
        // slot holding A, one holding B, A's PLT entry, through %rax
        // again; and a word after no call.
        let words = [0x1205, 0x1215, 0x1222, 0x1236, 0x1246, 0x1255, 0x1266, 0x1001].map(avma);
        let stack: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let sp = 0x7ff0_0000_0000;
        let kept: Vec<u64> = code.scan(std::process::id(), avma(0x1010), sp, &stack, &mut pages).into_iter().map(|(_, r)| r - bias).collect();
        assert_eq!(kept, [0x1205, 0x1222, 0x1236, 0x1255, 0x1266]);
        // A leaf in B: only B's direct caller, the register call and the
        // slot holding B.
        let kept: Vec<u64> = code.scan(std::process::id(), avma(0x1180), sp, &stack, &mut pages).into_iter().map(|(_, r)| r - bias).collect();
        assert_eq!(kept, [0x1215, 0x1222, 0x1246, 0x1266]);
    }
}
