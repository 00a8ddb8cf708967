//! A live Ruby 3.1 process read from outside (process_vm_readv): where
//! its execution context lives (for the BPF walker), and the names of
//! the iseqs and method entries its control frames hold.
//!
//! Layout of Debian 12's ruby 3.1.2 (libruby3.1 3.1.7+really3.1.2), from
//! Ruby 3.1.2's vm_core.h / method.h / iseq.h (as rbspy's bindgen output
//! for 3.1.2 lists them) and checked against the live interpreter
//! (tests/runtime_ruby.rs). libruby is stripped: only its dynamic symbols
//! are read.

use std::collections::HashMap;

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};

/// rb_iseq_t: its constant body.
const ISEQ_BODY: u64 = 16;
/// rb_iseq_constant_body: location.pathobj, .label, .first_lineno.
const BODY_PATHOBJ: u64 = 64;
const BODY_LABEL: u64 = 80;
const BODY_FIRST_LINENO: u64 = 88;
/// rb_method_entry_t: def; rb_method_definition_t: original_id.
const ME_DEF: u64 = 16;
const DEF_ORIGINAL_ID: u64 = 32;
/// RBasic flags: the type, the imemo type, the embed flags.
const T_MASK: u64 = 0x1f;
const T_STRING: u64 = 0x05;
const T_ARRAY: u64 = 0x07;
const FL_USHIFT: u64 = 12;
const IMEMO_MENT: u64 = 6;
const IMEMO_ISEQ: u64 = 7;
const FL_USER1: u64 = 1 << 13;
/// symbol.c: IDs above the operators' carry their serial above 4 scope
/// bits; each entry of the table's 512-entry units is (string, symbol).
const LAST_OP_ID: u64 = 0xa9;
const ID_ENTRY_UNIT: u64 = 512;
const MAX_STR: u64 = 4096;

/// A Ruby 3.1 process.
pub struct Vm {
    pid: u32,
    /// libruby's TLS module id and `ruby_current_ec`'s offset in its block.
    pub modid: u64,
    pub dtpoff: u64,
    /// Where `rb_vm_exec` lies: the native frames that run Ruby frames.
    pub vm_exec: (u64, u64),
    /// libruby's mappings.
    pub mapped: Vec<(u64, u64)>,
    /// Its wrappers of pthread's waits (`rb_native_cond_wait`, ...).
    pub native_waits: Vec<(u64, u64)>,
    /// `ruby_global_symbols` (not exported: found in `rb_id2str`'s code).
    symbols: Option<u64>,
    /// Method names by ID (IDs never change their name).
    ids: HashMap<u64, String>,
}

/// Whether `path` names Ruby 3.1's library.
pub fn is_libruby31(path: &str) -> bool {
    path.rsplit('/').next().unwrap_or("").starts_with("libruby-3.1.so")
}

impl Vm {
    /// The Ruby 3.1 of `pid` (Err: none, or not started far enough for its
    /// TLS module id to be set).
    pub fn find(pid: u32) -> Result<Vm, String> {
        let maps = wallclock_stream::procmaps::read(pid).ok_or_else(|| format!("pid {pid}: its maps cannot be read"))?;
        let mine: Vec<_> = maps.into_iter().map(|m| m.entry).filter(|m| is_libruby31(&m.path)).collect();
        let first = mine.first().ok_or_else(|| format!("pid {pid}: no libruby-3.1 mapped"))?;
        let path = first.path.clone();
        let data = crate::elf::map_file(&path).ok_or_else(|| format!("{path}: cannot map it"))?;
        let obj = object::File::parse(&*data).map_err(|e| format!("{path}: {e}"))?;
        let segments: Vec<(u64, u64, u64)> = obj.segments().map(|s| (s.file_range().0, s.address(), s.file_range().1)).collect();
        let bias = crate::elf::load_bias(&segments, first.start, first.offset).ok_or_else(|| format!("{path}: no segment holds {:#x}", first.offset))?;
        let (mut ec, mut vm_exec, mut id2str, mut native_waits) = (None, None, None, Vec::new());
        for s in obj.dynamic_symbols() {
            match s.name_bytes() {
                Ok(b"ruby_current_ec") => ec = Some((s.index(), s.address())),
                Ok(b"rb_vm_exec") => vm_exec = Some((s.address() + bias, s.address() + bias + s.size().max(1))),
                Ok(b"rb_id2str") => id2str = Some(s.address()),
                Ok(n) if n.starts_with(b"rb_native_cond_") || n.starts_with(b"rb_native_mutex_") => native_waits.push((s.address() + bias, s.address() + bias + s.size().max(1))),
                _ => {}
            }
        }
        let (ec_index, dtpoff) = ec.ok_or_else(|| format!("{path}: no ruby_current_ec"))?;
        let vm_exec = vm_exec.ok_or_else(|| format!("{path}: no rb_vm_exec"))?;
        // The GOT slot the loader fills with libruby's module id.
        let got = obj
            .dynamic_relocations()
            .into_iter()
            .flatten()
            .find(|(_, r)| r.flags() == object::RelocationFlags::Elf { r_type: object::elf::R_X86_64_DTPMOD64 } && r.target() == object::RelocationTarget::Symbol(ec_index))
            .map(|(off, _)| off)
            .ok_or_else(|| format!("{path}: no TLS module slot for ruby_current_ec"))?;
        let symbols = id2str.and_then(|a| global_symbols(&obj, a)).map(|a| a + bias);
        let mapped = mine.iter().filter(|m| m.path == path).map(|m| (m.start, m.end)).collect();
        let mut vm = Vm { pid, modid: 0, dtpoff, vm_exec, mapped, native_waits, symbols, ids: HashMap::new() };
        vm.modid = vm.u64(got + bias)?;
        if vm.modid == 0 || vm.modid > 4096 {
            return Err(format!("pid {pid}: libruby's TLS module id is {} (not yet loaded?)", vm.modid));
        }
        Ok(vm)
    }

    pub(crate) fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), String> {
        let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
        // SAFETY: one local iovec over `buf`, which outlives the call.
        let n = unsafe { libc::process_vm_readv(self.pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if n != buf.len() as isize {
            return Err(format!("pid {}: cannot read {} bytes at {addr:#x}", self.pid, buf.len()));
        }
        Ok(())
    }

    /// An object's first three words (an iseq's flags, wrapper and body;
    /// a method entry's flags, class and definition): what says it is
    /// still the object a name was read for.
    pub fn head(&self, obj: u64) -> Result<[u64; 3], String> {
        let mut b = [0u8; 24];
        self.read(obj, &mut b)?;
        Ok([0, 8, 16].map(|i| u64::from_le_bytes(b[i..i + 8].try_into().unwrap())))
    }

    fn u64(&self, addr: u64) -> Result<u64, String> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn flags(&self, obj: u64) -> Result<u64, String> {
        if obj == 0 || obj & 7 != 0 {
            return Err(format!("{obj:#x} is not an object"));
        }
        self.u64(obj)
    }

    /// A String's text.
    fn string(&self, s: u64) -> Result<String, String> {
        let f = self.flags(s)?;
        if f & T_MASK != T_STRING {
            return Err(format!("{s:#x} is not a String"));
        }
        let (len, at) = if f & FL_USER1 != 0 { (self.u64(s + 16)?, self.u64(s + 24)?) } else { ((f >> 14) & 0x1f, s + 16) };
        if len > MAX_STR {
            return Err(format!("a String of {len} bytes at {s:#x}"));
        }
        let mut b = vec![0u8; len as usize];
        self.read(at, &mut b)?;
        Ok(String::from_utf8_lossy(&b).into_owned())
    }

    /// Element `i` of an Array.
    fn array_at(&self, a: u64, i: u64) -> Result<u64, String> {
        let f = self.flags(a)?;
        if f & T_MASK != T_ARRAY {
            return Err(format!("{a:#x} is not an Array"));
        }
        let (len, at) = if f & FL_USER1 != 0 { ((f >> 15) & 3, a + 16) } else { (self.u64(a + 16)?, self.u64(a + 32)?) };
        if i >= len {
            return Err(format!("index {i} past an Array of {len}"));
        }
        self.u64(at + 8 * i)
    }

    /// An iseq's label, path and first line; None for what is not an
    /// iseq (a C block's ifunc).
    pub fn iseq(&self, iseq: u64) -> Result<Option<(String, String, u32)>, String> {
        if (self.flags(iseq)? >> FL_USHIFT) & 0xf != IMEMO_ISEQ {
            return Ok(None);
        }
        let body = self.u64(iseq + ISEQ_BODY)?;
        let label = self.string(self.u64(body + BODY_LABEL)?)?;
        let po = self.u64(body + BODY_PATHOBJ)?;
        let path = match self.flags(po)? & T_MASK {
            T_STRING => self.string(po)?,
            _ => self.string(self.array_at(po, 0)?)?,
        };
        // A Fixnum.
        let line = (self.u64(body + BODY_FIRST_LINENO)? >> 1) as u32;
        Ok(Some((label, path, line)))
    }

    /// The name of the method of a method entry (a C method's frame).
    pub fn method(&mut self, me: u64) -> Result<String, String> {
        if (self.flags(me)? >> FL_USHIFT) & 0xf != IMEMO_MENT {
            return Err(format!("{me:#x} is not a method entry"));
        }
        let def = self.u64(me + ME_DEF)?;
        let id = self.u64(def + DEF_ORIGINAL_ID)?;
        if let Some(n) = self.ids.get(&id) {
            return Ok(n.clone());
        }
        let n = self.id_name(id)?;
        self.ids.insert(id, n.clone());
        Ok(n)
    }

    fn id_name(&self, id: u64) -> Result<String, String> {
        let syms = self.symbols.ok_or("ruby_global_symbols not found")?;
        if id <= LAST_OP_ID {
            return Err(format!("operator id {id}"));
        }
        let serial = id >> 4;
        let last = self.u64(syms)? & 0xffff_ffff;
        if serial > last {
            return Err(format!("id {id:#x} past the last ({last})"));
        }
        let unit = self.array_at(self.u64(syms + 16)?, serial / ID_ENTRY_UNIT)?;
        self.string(self.array_at(unit, (serial % ID_ENTRY_UNIT) * 2)?)
    }
}

/// `ruby_global_symbols`'s link-time address, from `rb_id2str`'s code: it
/// jumps to `lookup_id_str`, whose first compare of the serial is with the
/// table's `last_id` (`cmp %edi, last_id(%rip)`).
fn global_symbols(obj: &object::File, id2str: u64) -> Option<u64> {
    let text = obj.section_by_name(".text")?;
    let code = |a: u64, n: u64| -> Option<&[u8]> {
        let d = text.data().ok()?;
        let off = a.checked_sub(text.address())? as usize;
        d.get(off..off + n as usize)
    };
    let c = code(id2str, 32)?;
    let j = c.iter().position(|&b| b == 0xe9)?;
    let rel = i32::from_le_bytes(c.get(j + 1..j + 5)?.try_into().ok()?);
    let target = (id2str + j as u64 + 5).wrapping_add(rel as i64 as u64);
    let t = code(target, 160)?;
    let k = t.windows(2).position(|w| w == [0x39, 0x3d])?;
    let disp = i32::from_le_bytes(t.get(k + 2..k + 6)?.try_into().ok()?);
    Some((target + k as u64 + 6).wrapping_add(disp as i64 as u64))
}
