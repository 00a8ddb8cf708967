//! Which kernel addresses a kallsyms symbol may name. kallsyms has no
//! sizes, and a lookup by the nearest lower symbol (blazesym's) names any
//! address after the kernel's last text symbol by that symbol: a frame of
//! a BPF program unloaded since the capture came out as
//! `__stop_runtime_ptr_USER_PTR_MAX`, a read-only data marker megabytes
//! away. Here an address is named only where it can lie in the code of the
//! symbol before it:
//!
//! - a symbol of code (`t`, `T`, `w`, `W`) that is not a marker of a
//!   section's end (`_etext`, `_einittext`, `*_text_end`) covers up to the
//!   next symbol; the last one of its module (or of all) covers one page,
//!   as the last code of a module (an ftrace trampoline, a BPF program
//!   pack's last program) has nothing after it to bound it;
//! - an address after a data symbol or an end marker is no symbol's:
//!   `[unknown]`, as perf writes it;
//! - in a BPF program (module `[bpf]`) it is `bpf_prog_<tag>_<name>` in
//!   module `[bpf]`, as perf names it.
//!
//! The capture's own record of the programs it saw loaded (the stream's
//! `ksyms` record, [`wallclock_stream::Ksyms`]) is asked before this table,
//! which reflects the kallsyms read now.

use std::io::BufRead;

use wallclock_stream::Frame;

/// The extent given to the last code symbol of its module.
pub(crate) const LAST_EXTENT: u64 = 4096;

/// One symbol of kallsyms, by address.
#[derive(Debug, Clone, Copy)]
struct Entry {
    addr: u64,
    /// Code that may be named (not data, not an end marker).
    code: bool,
    /// Index into `KernelText::modules` (0: the kernel image).
    module: u32,
    /// Index into `KernelText::bpf_names` for `[bpf]` symbols.
    bpf: Option<u32>,
}

/// What an address of a kernel stack is, by kallsyms.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Class<'a> {
    /// In a BPF program: its kallsyms name.
    Bpf(&'a str),
    /// In no symbol's code.
    Unknown,
    /// In the code of the symbol before it: the symbolizer names it.
    Named,
}

#[derive(Debug, Default)]
pub(crate) struct KernelText {
    entries: Vec<Entry>,
    modules: Vec<Box<str>>,
    bpf_names: Vec<Box<str>>,
}

/// Names that mark where a section of code ends: no code lies after them.
fn end_marker(name: &str) -> bool {
    matches!(name, "_etext" | "_einittext" | "__init_end" | "_end") || name.ends_with("_text_end")
}

impl KernelText {
    /// Parse kallsyms text (`ADDR TYPE NAME [MODULE]` per line). Lines
    /// with address 0 (kallsyms read without the right to see addresses)
    /// are left out; a table with none classifies every address `Named`.
    pub(crate) fn parse(input: impl BufRead) -> KernelText {
        let mut t = KernelText { modules: vec!["".into()], ..Default::default() };
        for line in input.lines() {
            let Ok(line) = line else { break };
            let mut it = line.split_ascii_whitespace();
            let (Some(addr), Some(ty), Some(name)) = (it.next(), it.next(), it.next()) else { continue };
            let Ok(addr) = u64::from_str_radix(addr, 16) else { continue };
            if addr == 0 {
                continue;
            }
            let module = match it.next() {
                None => 0,
                Some(m) => match t.modules.iter().position(|k| **k == *m) {
                    Some(i) => i as u32,
                    None => {
                        t.modules.push(m.into());
                        (t.modules.len() - 1) as u32
                    }
                },
            };
            let code = matches!(ty, "t" | "T" | "w" | "W") && !end_marker(name);
            let bpf = (&*t.modules[module as usize] == wallclock_stream::BPF_MODULE).then(|| {
                t.bpf_names.push(name.into());
                (t.bpf_names.len() - 1) as u32
            });
            t.entries.push(Entry { addr, code, module, bpf });
        }
        // Of symbols at one address, a data symbol or marker goes first, so
        // that the code symbol (the last) is the one an address finds.
        t.entries.sort_by_key(|e| (e.addr, e.code));
        t
    }

    /// `/proc/kallsyms` or a copy of it at `path`.
    pub(crate) fn read(path: &std::path::Path) -> std::io::Result<KernelText> {
        Ok(KernelText::parse(std::io::BufReader::new(std::fs::File::open(path)?)))
    }

    pub(crate) fn classify(&self, addr: u64) -> Class<'_> {
        if self.entries.is_empty() {
            return Class::Named;
        }
        let i = self.entries.partition_point(|e| e.addr <= addr);
        let Some(e) = i.checked_sub(1).map(|i| self.entries[i]) else { return Class::Unknown };
        if !e.code {
            return Class::Unknown;
        }
        let last_of_module = self.entries.get(i).is_none_or(|next| next.module != e.module);
        if last_of_module && addr - e.addr >= LAST_EXTENT {
            return Class::Unknown;
        }
        match e.bpf {
            Some(n) => Class::Bpf(&self.bpf_names[n as usize]),
            None => Class::Named,
        }
    }
}

impl crate::engine::Engine {
    /// Remember a stream's kernel symbols (several records add up).
    pub fn add_ksyms(&mut self, k: &wallclock_stream::Ksyms) {
        let mut k = k.clone();
        k.syms.sort_by_key(|s| s.addr);
        match self.stream_ksyms.iter_mut().find(|m| m.module == k.module) {
            Some(m) => m.merge(k),
            None => self.stream_ksyms.push(k),
        }
    }

    /// The frame of kernel address `addr` (looked up as `lookup`) where
    /// the stream's symbols or kallsyms' extents decide it; `None` where
    /// the symbolizer names it.
    pub(crate) fn kernel_frame(&mut self, addr: u64, lookup: u64) -> Option<Frame> {
        for k in &self.stream_ksyms {
            if let Some(s) = k.find(lookup) {
                return Some(Frame { module: Some(k.module.clone()), ..Frame::kernel(s.name.clone()) });
            }
        }
        if self.ktext.is_none() {
            let path = match (&self.opts.kallsyms, self.kallsyms.path()) {
                (Some(p), _) => p.clone(),
                (None, Some(p)) => p.to_path_buf(),
                (None, None) => "/proc/kallsyms".into(),
            };
            // Unreadable: the symbolizer says so for every kernel address.
            self.ktext = Some(KernelText::read(&path).unwrap_or_default());
        }
        match self.ktext.as_ref()?.classify(lookup) {
            Class::Named => None,
            Class::Bpf(name) => Some(Frame { module: Some(wallclock_stream::BPF_MODULE.into()), ..Frame::kernel(name) }),
            Class::Unknown => Some(Frame::kernel(crate::names::unknown_addr(addr))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tail of this machine's kallsyms (kernel 6.18), a module and a
    /// BPF program pack added.
    const KALLSYMS: &str = "\
ffffffff81000000 T _stext
ffffffff81000010 T do_one
ffffffff81000100 t do_two
ffffffff822090c0 T last_fn
ffffffff822090c8 T _etext
ffffffff82400000 D __start_rodata
ffffffff83b264c8 R __start_runtime_ptr_USER_PTR_MAX
ffffffff83b266f0 R __stop_runtime_ptr_USER_PTR_MAX
ffffffffc0000000 t bpf_prog_6deef7357e7b4530_switch_out\t[bpf]
ffffffffc0000800 t bpf_prog_0123456789abcdef_tick\t[bpf]
ffffffffc0201000 t ftrace_trampoline\t[__builtin__ftrace]
ffffffffc0400000 t mod_fn\t[mymod]
ffffffffc0400800 t mod_fn2\t[mymod]
ffffffffc0401000 d mod_data\t[mymod]
0000000000000000 T hidden
";

    fn table() -> KernelText {
        KernelText::parse(KALLSYMS.as_bytes())
    }

    #[test]
    fn code_before_the_next_symbol_is_named() {
        let t = table();
        assert_eq!(t.classify(0xffffffff81000010), Class::Named);
        assert_eq!(t.classify(0xffffffff810000ff), Class::Named);
        assert_eq!(t.classify(0xffffffff822090c7), Class::Named, "the last function, before _etext");
        assert_eq!(t.classify(0xffffffffc0400900), Class::Named, "a module's function before its data");
    }

    /// The fault this module exists for: an unloaded program's address,
    /// after the last kernel symbol (a data marker), is no symbol's.
    #[test]
    fn past_a_data_symbol_or_an_end_marker_is_unknown() {
        let t = table();
        assert_eq!(t.classify(0xffffffff83b26700), Class::Unknown, "after __stop_runtime_ptr_USER_PTR_MAX");
        assert_eq!(t.classify(0xffffffffc0100000), Class::Unknown, "past the BPF pack's last program");
        assert_eq!(t.classify(0xffffffff822090c8), Class::Unknown, "at _etext");
        assert_eq!(t.classify(0xffffffff82300000), Class::Unknown, "between _etext and rodata");
        assert_eq!(t.classify(0xffffffffc0401010), Class::Unknown, "a module's data");
        assert_eq!(t.classify(0xffffffff80000000), Class::Unknown, "before the first symbol");
    }

    #[test]
    fn the_last_code_of_a_module_covers_a_page() {
        let t = table();
        assert_eq!(t.classify(0xffffffffc0201000 + LAST_EXTENT - 1), Class::Named);
        assert_eq!(t.classify(0xffffffffc0201000 + LAST_EXTENT), Class::Unknown);
        assert_eq!(t.classify(0xffffffffc0300000), Class::Unknown, "far past the trampoline");
    }

    #[test]
    fn bpf_programs_are_named_as_kallsyms_names_them() {
        let t = table();
        assert_eq!(t.classify(0xffffffffc0000040), Class::Bpf("bpf_prog_6deef7357e7b4530_switch_out"));
        assert_eq!(t.classify(0xffffffffc0000810), Class::Bpf("bpf_prog_0123456789abcdef_tick"));
    }

    #[test]
    fn hidden_addresses_leave_everything_to_the_symbolizer() {
        let t = KernelText::parse("0000000000000000 T _stext\n0000000000000000 T do_one\n".as_bytes());
        assert_eq!(t.classify(0xffffffff83b26700), Class::Named);
    }

    #[test]
    fn this_machines_kallsyms_parses() {
        let Ok(t) = KernelText::read(std::path::Path::new("/proc/kallsyms")) else { return };
        if t.entries.is_empty() {
            return; // not root: addresses hidden
        }
        assert!(t.entries.len() > 1000);
        assert!(t.entries.windows(2).all(|w| w[0].addr <= w[1].addr));
    }
}
