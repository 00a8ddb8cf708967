//! A live Ruby process (3.1 to 3.4) read from outside
//! (process_vm_readv): where its execution context lives (for the BPF
//! walker), and the names of the iseqs and method entries its control
//! frames hold.
//!
//! Layouts (`Layout`): Ruby 3.1.2's, 3.3.8's and 3.4.5's vm_core.h /
//! method.h / iseq.h / rstring.h / rarray.h, as rbspy's bindgen output for
//! those releases lists them (`offset_of!` of each field), and 3.2.3's,
//! `offsetof` printed by a C program built against its own source (Ubuntu
//! 24.04's, with the build's config.h); checked against the live
//! interpreters (Debian 12's 3.1.2, Ubuntu 24.04's 3.2.3, Debian forky's
//! 3.3.8, Debian experimental's 3.4.11: tests/runtime_ruby.rs). What
//! moved: from 3.2 a String keeps its length in a field of its own and an
//! Array 7 bits of embedded length (variable-width allocation), an iseq's
//! first line is a C int, not a Fixnum, and the GVL's wait queue is the
//! thread scheduler's ready queue; in 3.3 the control frame lost a word
//! (64 -> 56 bytes) and the thread's queue node moved. libruby is stripped: only its
//! dynamic symbols are read, and where 3.3's build no longer exports
//! `ruby_current_ec` and `rb_vm_exec`, they are found in the code of
//! functions it does export (`rb_thread_current`, `rb_iseq_eval_main`).
//! A Ruby built into its executable (no `--enable-shared`) keeps its
//! symbol table: `ruby_current_ec` is in the executable's own TLS block
//! (module 1), its version in `ruby_api_version`.

use std::collections::HashMap;

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};

use crate::elf::code_at;

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

/// What differs between the Ruby versions read (the rest above is the
/// same in 3.1-3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// `sizeof(rb_control_frame_t)`.
    pub cfp_size: u32,
    /// `rb_execution_context_t.thread_ptr`, `rb_thread_t.ractor`.
    pub ec_thread: u32,
    pub th_ractor: u32,
    /// The thread's node that is linked into its ractor's GVL wait queue
    /// (3.1: `native_thread_data.node.gvl`; 3.3+: `sched.node.readyq`),
    /// and how far into `rb_ractor_t` the queue's head may lie.
    pub th_waitq: u32,
    pub ractor_span: u32,
    /// RString: its length in a field at +16 and the embedded bytes at
    /// +24 (3.2+), else an embedded one's length in its flags (bits
    /// 14-18) and its bytes at +16.
    str_len_field: bool,
    /// RArray: an embedded one's length, in its flags from bit 15.
    ary_embed_len_mask: u64,
    /// `first_lineno`: a Fixnum (3.1), else a C int.
    lineno_fixnum: bool,
}

/// Ruby 3.1 (3.1.2's layout; the structs read did not change within 3.1).
const RUBY_31: Layout = Layout { cfp_size: 64, ec_thread: 48, th_ractor: 24, th_waitq: 104, ractor_span: 2048, str_len_field: false, ary_embed_len_mask: 0x3, lineno_fixnum: true };
/// Ruby 3.2 (3.2.3's): 3.3's String, Array and iseq, 3.1's control frame
/// (64 bytes: 3.3 dropped `__bp__`); the node `sched.node.readyq` at +56,
/// the ready queue's head at +384 of a 736-byte rb_ractor_t.
const RUBY_32: Layout = Layout { cfp_size: 64, ec_thread: 48, th_ractor: 24, th_waitq: 56, ractor_span: 1024, str_len_field: true, ary_embed_len_mask: 0x7f, lineno_fixnum: false };
/// Ruby 3.3 and 3.4 (3.3.8's and 3.4.5's: the same for what is read;
/// the ready queue's head at +344 of a 600 / 520-byte rb_ractor_t).
const RUBY_33: Layout = Layout { cfp_size: 56, ec_thread: 48, th_ractor: 24, th_waitq: 72, ractor_span: 1024, str_len_field: true, ary_embed_len_mask: 0x7f, lineno_fixnum: false };

/// The layout of each Ruby 3.N read, by N: the versions read.
const LAYOUTS: [(u32, Layout); 4] = [(1, RUBY_31), (2, RUBY_32), (3, RUBY_33), (4, RUBY_33)];

/// The layout of Ruby 3.`minor`, where it is read.
pub fn layout(minor: u32) -> Option<Layout> {
    LAYOUTS.iter().find(|l| l.0 == minor).map(|l| l.1)
}

/// The Ruby versions read (`3.N`), those of [`LAYOUTS`]: what the
/// stream's header says (`runtime_versions`) and the capture's warnings.
pub fn versions() -> Vec<String> {
    LAYOUTS.iter().map(|l| format!("3.{}", l.0)).collect()
}

/// The versions read, as the capture says them (`Ruby 3.1-3.4`).
pub fn read_said() -> String {
    format!("Ruby {}", wallclock_stream::versions_said(&versions()))
}

/// A Ruby process.
pub struct Vm {
    pid: u32,
    /// Its minor version (3.N) and that version's layout.
    pub minor: u32,
    pub layout: Layout,
    /// The TLS module id of libruby (or of the executable Ruby is built
    /// into: 1) and `ruby_current_ec`'s offset in its block.
    pub modid: u64,
    pub dtpoff: u64,
    /// Where `rb_vm_exec` lies: the native frames that run Ruby frames.
    pub vm_exec: (u64, u64),
    /// The mappings of libruby (or of the executable it is built into).
    pub mapped: Vec<(u64, u64)>,
    /// Its wrappers of pthread's waits (`rb_native_cond_wait`, ...).
    pub native_waits: Vec<(u64, u64)>,
    /// `ruby_global_symbols` (not exported: found in `rb_id2str`'s code).
    symbols: Option<u64>,
    /// Method names by ID (IDs never change their name).
    ids: HashMap<u64, String>,
}

/// The minor version of the Ruby 3 library `path` names
/// (`libruby-3.N.so...`), read or not.
pub fn libruby_minor(path: &str) -> Option<u32> {
    let name = path.rsplit('/').next().unwrap_or("");
    let rest = name.strip_prefix("libruby-3.")?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    if !rest[digits.len()..].starts_with(".so") {
        return None;
    }
    digits.parse().ok()
}

impl Vm {
    /// The Ruby of `pid` (Err: none, one whose frames are not read, or
    /// not started far enough for its TLS module id to be set): a
    /// `libruby-3.N.so` (distributions' and ruby-build's builds), else the
    /// executable itself when it is a `ruby*` with Ruby built in (Ruby's
    /// own default, `./configure && make install`; ruby-build with
    /// `--disable-shared`).
    pub fn find(pid: u32) -> Result<Vm, String> {
        let maps = wallclock_stream::procmaps::read(pid).ok_or_else(|| format!("pid {pid}: its maps cannot be read"))?;
        let entries: Vec<_> = maps.into_iter().map(|m| m.entry).collect();
        let lib = entries.iter().find(|m| libruby_minor(&m.path).is_some()).map(|m| m.path.clone());
        let exe = || std::fs::read_link(format!("/proc/{pid}/exe")).ok().map(|p| p.to_string_lossy().into_owned()).filter(|p| p.rsplit('/').next().unwrap_or("").starts_with("ruby"));
        let (path, built_in) = match lib {
            Some(p) => (p, false),
            None => (exe().ok_or_else(|| format!("pid {pid}: no libruby-3.N mapped"))?, true),
        };
        let mine: Vec<_> = entries.into_iter().filter(|m| m.path == path).collect();
        let first = mine.first().ok_or_else(|| format!("pid {pid}: {path} is not mapped"))?;
        // Through the process's own root first (a container's file).
        let data = crate::elf::map_file(&format!("/proc/{pid}/root{path}"))
            .or_else(|| crate::elf::map_file(&path))
            .ok_or_else(|| format!("{path}: cannot map it"))?;
        let obj = object::File::parse(&*data).map_err(|e| format!("{path}: {e}"))?;
        let segments: Vec<(u64, u64, u64)> = obj.segments().map(|s| (s.file_range().0, s.address(), s.file_range().1)).collect();
        let bias = crate::elf::load_bias(&segments, first.start, first.offset).ok_or_else(|| format!("{path}: no segment holds {:#x}", first.offset))?;
        let (mut ec, mut vm_exec, mut id2str, mut native_waits) = (None, None, None, Vec::new());
        let (mut thread_current, mut eval_main, mut api_version, mut symbols) = (None, None, None, None);
        // A library is stripped (its exported symbols only); an
        // executable keeps its own table unless stripped too.
        let table = if built_in { Some(obj.symbols()) } else { None };
        for s in obj.dynamic_symbols().chain(table.into_iter().flatten()) {
            match s.name_bytes() {
                Ok(b"ruby_current_ec") => ec = Some((s.index(), s.address())),
                Ok(b"rb_vm_exec") => vm_exec = Some((s.address(), s.address() + s.size().max(1))),
                Ok(b"rb_id2str") => id2str = Some(s.address()),
                Ok(b"rb_thread_current") => thread_current = Some(s.address()),
                Ok(b"rb_iseq_eval_main") => eval_main = Some(s.address()),
                Ok(b"ruby_api_version") => api_version = Some(s.address()),
                Ok(b"ruby_global_symbols") => symbols = Some(s.address()),
                Ok(n) if n.starts_with(b"rb_native_cond_") || n.starts_with(b"rb_native_mutex_") => native_waits.push((s.address() + bias, s.address() + bias + s.size().max(1))),
                _ => {}
            }
        }
        let minor = match libruby_minor(&path) {
            Some(m) => m,
            // `ruby_api_version`: {3, N, 0}.
            None => {
                let a = api_version.ok_or_else(|| format!("{path}: no libruby-3.N mapped and no ruby_api_version in it"))?;
                let mut b = [0u8; 8];
                crate::procmem::Mem { pid }.read(a + bias, &mut b)?;
                let (major, minor) = (u32::from_le_bytes(b[..4].try_into().unwrap()), u32::from_le_bytes(b[4..].try_into().unwrap()));
                if major != 3 {
                    return Err(format!("pid {pid}: runs Ruby {major}.{minor}, whose frames are not walked (the capture reads {})", read_said()));
                }
                minor
            }
        };
        let layout = layout(minor).ok_or_else(|| format!("pid {pid}: runs Ruby 3.{minor}, whose frames are not walked (the capture reads {})", read_said()))?;
        // Where `ruby_current_ec` lies: the module id and the offset in
        // its TLS block. The executable's own TLS is module 1, the
        // variable's value its offset there. A library's module id is in
        // a GOT slot the loader fills: the exported symbol's relocation
        // (3.1), else (3.3: not exported) the general-dynamic TLS access
        // of `rb_thread_current` (GET_EC()) names the slot.
        let (got, dtpoff) = match ec {
            _ if built_in => (None, ec.map(|e| e.1).ok_or_else(|| format!("{path}: no ruby_current_ec in its symbols (stripped?)"))?),
            Some((index, dtpoff)) => {
                let got = obj
                    .dynamic_relocations()
                    .into_iter()
                    .flatten()
                    .find(|(_, r)| r.flags() == object::RelocationFlags::Elf { r_type: object::elf::R_X86_64_DTPMOD64 } && r.target() == object::RelocationTarget::Symbol(index))
                    .map(|(off, _)| off)
                    .ok_or_else(|| format!("{path}: no TLS module slot for ruby_current_ec"))?;
                (Some(got), dtpoff)
            }
            None => thread_current.and_then(|a| tls_of_current_ec(&obj, a)).map(|(g, o)| (Some(g), o)).ok_or_else(|| format!("{path}: neither ruby_current_ec nor its TLS access in rb_thread_current"))?,
        };
        // The VM's instruction loop: its symbol (3.1), else (3.3: static)
        // the function `rb_iseq_eval_main` ends by jumping to (vm_exec),
        // its extent from the unwind table.
        let vm_exec = vm_exec.or_else(|| eval_main.and_then(|a| tail_callee(&obj, a))).ok_or_else(|| format!("{path}: neither rb_vm_exec nor rb_iseq_eval_main's tail call"))?;
        let vm_exec = (vm_exec.0 + bias, vm_exec.1 + bias);
        let symbols = symbols.or_else(|| id2str.and_then(|a| global_symbols(&obj, a))).map(|a| a + bias);
        let mapped = mine.iter().map(|m| (m.start, m.end)).collect();
        let mut vm = Vm { pid, minor, layout, modid: 1, dtpoff, vm_exec, mapped, native_waits, symbols, ids: HashMap::new() };
        if let Some(got) = got {
            vm.modid = vm.u64(got + bias)?;
        }
        if vm.modid == 0 || vm.modid > 4096 {
            return Err(format!("pid {pid}: libruby's TLS module id is {} (not yet loaded?)", vm.modid));
        }
        Ok(vm)
    }

    pub(crate) fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), String> {
        crate::procmem::Mem { pid: self.pid }.read(addr, buf)
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
        let (len, at) = match (f & FL_USER1 != 0, self.layout.str_len_field) {
            (true, true) => (self.u64(s + 16)?, self.u64(s + 24)?),
            (false, true) => (self.u64(s + 16)?, s + 24),
            (true, false) => (self.u64(s + 16)?, self.u64(s + 24)?),
            (false, false) => ((f >> 14) & 0x1f, s + 16),
        };
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
        let (len, at) = if f & FL_USER1 != 0 { ((f >> 15) & self.layout.ary_embed_len_mask, a + 16) } else { (self.u64(a + 16)?, self.u64(a + 32)?) };
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
        // A Fixnum (3.1), else a C int.
        let word = self.u64(body + BODY_FIRST_LINENO)?;
        let line = if self.layout.lineno_fixnum { (word >> 1) as u32 } else { word as u32 };
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
    let c = code_at(obj, id2str, 32)?;
    let j = c.iter().position(|&b| b == 0xe9)?;
    let rel = i32::from_le_bytes(c.get(j + 1..j + 5)?.try_into().ok()?);
    let target = (id2str + j as u64 + 5).wrapping_add(rel as i64 as u64);
    let t = code_at(obj, target, 160)?;
    let k = t.windows(2).position(|w| w == [0x39, 0x3d])?;
    let disp = i32::from_le_bytes(t.get(k + 2..k + 6)?.try_into().ok()?);
    Some((target + k as u64 + 6).wrapping_add(disp as i64 as u64))
}

/// The GOT's `tls_index` (its module-id slot) and the offset in the
/// module's TLS block of the variable `rb_thread_current` reads first:
/// `ruby_current_ec`, as GET_EC() reads it, by the general-dynamic
/// sequence `data16 lea slot(%rip),%rdi; data16 data16 rex.W call
/// __tls_get_addr; mov disp(%rax),%rax` (a variable of the library's own,
/// not exported: the offset is in the slot's second word, with no
/// relocation).
fn tls_of_current_ec(obj: &object::File, func: u64) -> Option<(u64, u64)> {
    let c = code_at(obj, func, 64)?;
    let i = c.windows(4).position(|w| w == [0x66, 0x48, 0x8d, 0x3d])?;
    if c.get(i + 8..i + 12)? != [0x66, 0x66, 0x48, 0xe8] {
        return None;
    }
    let rel = i32::from_le_bytes(c.get(i + 4..i + 8)?.try_into().ok()?);
    let slot = (func + i as u64 + 8).wrapping_add_signed(i64::from(rel));
    // mov (%rax),%rax or mov disp8(%rax),%rax after the call.
    let disp = match c.get(i + 16..i + 20)? {
        [0x48, 0x8b, 0x00, _] => 0,
        [0x48, 0x8b, 0x40, d] => u64::from(*d as i8 as u8),
        _ => return None,
    };
    let off = u64::from_le_bytes(data_at(obj, slot + 8, 8)?.try_into().ok()?);
    Some((slot, off + disp))
}

/// The function `func` ends by jumping to (its last `jmp rel32` before
/// its end, by the unwind table), and that function's extent by its
/// unwind-table entry: `rb_iseq_eval_main` returns `vm_exec(ec)`.
fn tail_callee(obj: &object::File, func: u64) -> Option<(u64, u64)> {
    use gimli::{BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, UnwindSection};
    let (hdr, eh, text) = (obj.section_by_name(".eh_frame_hdr")?, obj.section_by_name(".eh_frame")?, obj.section_by_name(".text")?);
    let bases = BaseAddresses::default().set_eh_frame_hdr(hdr.address()).set_eh_frame(eh.address()).set_text(text.address());
    let parsed = EhFrameHdr::new(hdr.data().ok()?, LittleEndian).parse(&bases, 8).ok()?;
    let table = parsed.table()?;
    let eh = EhFrame::new(eh.data().ok()?, LittleEndian);
    let extent = |a: u64| table.fde_for_address(&eh, &bases, a, EhFrame::cie_from_offset).ok().map(|f| (f.initial_address(), f.initial_address() + f.len()));
    let (start, end) = extent(func)?;
    let c = code_at(obj, start, end - start)?;
    // Instructions are not decoded: of the `e9` bytes whose target is a
    // function's start by the unwind table, the first.
    (0..c.len().saturating_sub(4)).filter(|&i| c[i] == 0xe9).find_map(|i| {
        let rel = i32::from_le_bytes(c[i + 1..i + 5].try_into().ok()?);
        let target = (start + i as u64 + 5).wrapping_add_signed(i64::from(rel));
        let (s, e) = extent(target)?;
        (s == target && !(start..end).contains(&target)).then_some((s, e))
    })
}

/// `n` bytes of the file's data at link-time address `a` (any section
/// with contents: the GOT).
fn data_at<'a>(obj: &'a object::File, a: u64, n: u64) -> Option<&'a [u8]> {
    obj.sections().find(|s| s.address() <= a && a + n <= s.address() + s.size()).and_then(|s| {
        let d = s.data().ok()?;
        d.get((a - s.address()) as usize..(a - s.address() + n) as usize)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_library_names() {
        assert_eq!(libruby_minor("/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1.2"), Some(1));
        assert_eq!(libruby_minor("/usr/lib/x86_64-linux-gnu/libruby-3.3.so.3.3"), Some(3));
        assert_eq!(libruby_minor("/opt/ruby/lib/libruby-3.4.so"), Some(4));
        assert_eq!(libruby_minor("/usr/lib/libruby-static.a"), None);
        for m in 0..20 {
            assert_eq!(layout(m).is_some(), versions().contains(&format!("3.{m}")), "Ruby 3.{m}");
        }
        assert_eq!(read_said(), "Ruby 3.1-3.4");
        assert_eq!(layout(1).unwrap().cfp_size, 64);
        assert_eq!(layout(2).unwrap().cfp_size, 64);
        assert_eq!(layout(3).unwrap().cfp_size, 56);
    }
}
