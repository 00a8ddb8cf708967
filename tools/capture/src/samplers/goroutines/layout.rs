//! What the goroutine sampler must know of one Go binary, read from the
//! binary itself: where `runtime.allgs`/`runtime.allglen` are (symbol
//! table), the offsets of the `runtime.g` fields it reads and the values of
//! the runtime's status and wait-reason constants (DWARF, which `go build`
//! keeps unless `-ldflags=-w`), and its functions (symbol table) to name
//! the frames. Nothing is hard-coded per Go version but the display text
//! of a wait reason, which Go keeps in an array with no symbol.

use std::collections::HashMap;
use anyhow::{anyhow, Context, Result};
use gimli::{EndianSlice, LittleEndian};
use object::{Object, ObjectSection, ObjectSymbol};

/// Offsets in `runtime.g` (Go 1.19 amd64: 0, 8, 56, 64, 104, 144, 152, 176).
#[derive(Debug, Clone, Copy, Default)]
pub struct GOffsets {
    pub stack_hi: u64,
    pub sched_sp: u64,
    pub sched_pc: u64,
    pub sched_bp: u64,
    pub syscallsp: u64,
    pub syscallpc: u64,
    pub atomicstatus: u64,
    pub goid: u64,
    pub waitreason: u64,
    pub startpc: u64,
    /// Bytes of a g read per goroutine (up to the last field read).
    pub len: u64,
}

pub struct Layout {
    pub allgs: u64,
    pub allglen: u64,
    /// Link-time address of the lowest PT_LOAD (the bias of a PIE).
    pub base_vaddr: u64,
    pub pie: bool,
    pub g: GOffsets,
    /// `_Grunnable`... by value; `runtime.waitReason*` display texts by value.
    pub states: HashMap<u64, String>,
    pub reasons: HashMap<u64, String>,
    /// (start, end, name) of each function, sorted.
    funcs: Vec<(u64, u64, String)>,
}

impl Layout {
    /// The function containing the link-time address `a`.
    pub fn func(&self, a: u64) -> Option<&str> {
        let i = self.funcs.partition_point(|f| f.0 <= a).checked_sub(1)?;
        let f = &self.funcs[i];
        (a < f.1).then_some(f.2.as_str())
    }

    /// Read `path`; Ok(None) when it is no Go binary (no `runtime.allgs`).
    pub fn read(path: &std::path::Path) -> Result<Option<Layout>> {
        let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: a read-only private map of an executable being run (the
        // kernel refuses writes to it: ETXTBSY).
        let data = unsafe { memmap2::Mmap::map(&file) }.with_context(|| format!("mapping {}", path.display()))?;
        let obj = object::File::parse(&*data).with_context(|| format!("{}: not an ELF file", path.display()))?;
        let mut syms: HashMap<&str, u64> = HashMap::new();
        let mut funcs = Vec::new();
        for s in obj.symbols() {
            let Ok(name) = s.name() else { continue };
            match s.kind() {
                object::SymbolKind::Text if s.address() != 0 => funcs.push((s.address(), s.address() + s.size().max(1), name.to_string())),
                object::SymbolKind::Data => {
                    syms.insert(name, s.address());
                }
                _ => {}
            }
        }
        let (Some(&allgs), Some(&allglen)) = (syms.get("runtime.allgs"), syms.get("runtime.allglen")) else {
            return Ok(None);
        };
        funcs.sort_unstable();
        let base_vaddr = object::read::elf::ElfFile64::<object::Endianness>::parse(&*data)
            .ok()
            .and_then(|e| {
                use object::read::elf::ProgramHeader;
                let endian = e.endian();
                e.elf_program_headers().iter().filter(|p| p.p_type(endian) == object::elf::PT_LOAD).map(|p| p.p_vaddr(endian) & !0xfff).min()
            })
            .unwrap_or(0);
        let pie = obj.kind() == object::ObjectKind::Dynamic;
        let dw = dwarf_facts(&obj).with_context(|| format!("{}: the runtime's DWARF (built with -ldflags=-w?)", path.display()))?;
        Ok(Some(Layout { allgs, allglen, base_vaddr, pie, g: dw.0, states: dw.1, reasons: dw.2, funcs }))
    }
}

type Facts = (GOffsets, HashMap<u64, String>, HashMap<u64, String>);

fn section(obj: &object::File, name: &str) -> Vec<u8> {
    use std::io::Read;
    let Some(s) = obj.section_by_name(name) else { return Vec::new() };
    let Ok(c) = s.compressed_data() else { return Vec::new() };
    match c.format {
        object::CompressionFormat::None => c.data.to_vec(),
        object::CompressionFormat::Zlib => {
            let mut out = Vec::with_capacity(c.uncompressed_size as usize);
            flate2::read::ZlibDecoder::new(c.data).read_to_end(&mut out).map(|_| out).unwrap_or_default()
        }
        _ => Vec::new(),
    }
}

/// The members of runtime.g, runtime.gobuf, runtime.stack and the
/// runtime's `_G*` and `waitReason*` constants.
fn dwarf_facts(obj: &object::File) -> Result<Facts> {
    let owned = gimli::DwarfSections::load(|id| Ok::<_, gimli::Error>(section(obj, id.name())))?;
    let dwarf = owned.borrow(|s| EndianSlice::new(s, LittleEndian));
    let wanted = ["runtime.g", "runtime.gobuf", "runtime.stack"];
    let mut structs: HashMap<String, HashMap<String, u64>> = HashMap::new();
    let (mut states, mut reasons) = (HashMap::new(), HashMap::new());
    let mut units = dwarf.units();
    while let Some(header) = units.next()? {
        let unit = dwarf.unit(header)?;
        let mut entries = unit.entries();
        let mut inside: Option<(isize, String)> = None;
        while let Some(e) = entries.next_dfs()? {
            let depth = e.depth();
            if inside.as_ref().is_some_and(|(d, _)| depth <= *d) {
                inside = None;
            }
            let name = match e.attr_value(gimli::DW_AT_name) {
                Some(v) => dwarf.attr_string(&unit, v)?.to_string_lossy().into_owned(),
                None => continue,
            };
            match e.tag() {
                gimli::DW_TAG_structure_type if wanted.contains(&name.as_str()) && !structs.contains_key(&name) => {
                    structs.insert(name.clone(), HashMap::new());
                    inside = Some((depth, name));
                }
                gimli::DW_TAG_member => {
                    if let Some((_, s)) = &inside {
                        if let Some(off) = e.attr(gimli::DW_AT_data_member_location).and_then(|a| a.udata_value()) {
                            structs.get_mut(s).unwrap().insert(name, off);
                        }
                    }
                }
                gimli::DW_TAG_constant => {
                    let Some(a) = e.attr(gimli::DW_AT_const_value) else { continue };
                    let Some(v) = a.udata_value().or_else(|| a.sdata_value().map(|v| v as u64)) else { continue };
                    if let Some(s) = name.strip_prefix("runtime._G") {
                        states.insert(v, s.to_ascii_lowercase());
                    } else if let Some(r) = name.strip_prefix("runtime.waitReason") {
                        reasons.insert(v, super::reasons::text(r));
                    }
                }
                _ => {}
            }
        }
    }
    let field = |s: &str, f: &str| -> Result<u64> {
        structs.get(s).and_then(|m| m.get(f)).copied().ok_or_else(|| anyhow!("no {s}.{f}"))
    };
    let sched = field("runtime.g", "sched")?;
    let g = GOffsets {
        stack_hi: field("runtime.g", "stack")? + field("runtime.stack", "hi")?,
        sched_sp: sched + field("runtime.gobuf", "sp")?,
        sched_pc: sched + field("runtime.gobuf", "pc")?,
        sched_bp: sched + field("runtime.gobuf", "bp")?,
        syscallsp: field("runtime.g", "syscallsp")?,
        syscallpc: field("runtime.g", "syscallpc")?,
        atomicstatus: field("runtime.g", "atomicstatus")?,
        goid: field("runtime.g", "goid")?,
        waitreason: field("runtime.g", "waitreason")?,
        startpc: field("runtime.g", "startpc")?,
        len: 0,
    };
    let len = [g.stack_hi, g.sched_sp, g.sched_pc, g.sched_bp, g.syscallsp, g.syscallpc, g.atomicstatus, g.goid, g.waitreason, g.startpc].into_iter().max().unwrap() + 8;
    if states.is_empty() {
        return Err(anyhow!("no runtime._G* constants"));
    }
    Ok((GOffsets { len, ..g }, states, reasons))
}
