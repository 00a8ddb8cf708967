//! HotSpot's own description of its layout, read from the live JVM:
//! libjvm.so exports `gHotSpotVMStructs` (type, field, offset or static
//! address), `gHotSpotVMTypes` (type, size), `gHotSpotVMIntConstants`
//! and the offsets and strides of their entries, for the serviceability
//! agent. The entries' strings and the tables themselves are filled by
//! the loader and HotSpot's static initialisers: they are read from the
//! process, not the file.

use std::collections::HashMap;

use object::{Object, ObjectSymbol};

use super::mem::Mem;

/// The fields, sizes and constants the frame walker uses.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    pub heaps: u64,
    pub array_len: u64,
    pub array_data: u64,
    pub heap_memory: u64,
    pub heap_segmap: u64,
    pub heap_log2_segment: u64,
    pub vs_low: u64,
    /// The top of what the space reserved (`_high_boundary`), where the
    /// tables have it; else of what it committed (`_high`).
    pub vs_high: u64,
    pub block_size: u64,
    pub block_used: u64,
    pub blob_name: u64,
    pub blob_frame_complete: u64,
    /// Bytes of `_frame_complete_offset` (int16_t since JDK 23).
    pub blob_frame_complete_len: usize,
    pub blob_frame_size: u64,
    /// Where its code begins: a pointer field (to JDK 22), or an offset
    /// from the blob (JDK 23+).
    pub blob_code: CodeBegin,
    pub blob_size: u64,
    pub compiled_method: u64,
    pub interp_code: u64,
    pub queue_buffer: u64,
    pub queue_limit: u64,
    pub method_const: u64,
    pub const_constants: u64,
    pub const_name_index: u64,
    pub const_signature_index: u64,
    pub pool_holder: u64,
    pub pool_size: u64,
    pub klass_name: u64,
    pub symbol_length: u64,
    pub symbol_body: u64,
    /// Interpreter frame slots, in words from the frame pointer.
    pub frame_sender_sp: i64,
    pub frame_method: i64,
}

#[derive(Debug, Clone, Copy, Default)]
pub enum CodeBegin {
    #[default]
    None,
    Pointer(u64),
    Offset(u64),
}

/// What the tables say: (type, field) -> offset or static address and the
/// field's type, type sizes, integer constants.
struct Tables {
    fields: HashMap<(String, String), u64>,
    types: HashMap<(String, String), String>,
    sizes: HashMap<String, u64>,
    ints: HashMap<String, i64>,
}

/// libjvm.so's path and load bias in `pid`.
pub fn libjvm(pid: u32) -> Option<(String, u64)> {
    let maps = wallclock_stream::procmaps::read(pid)?;
    let m = maps.iter().filter(|m| m.entry.path.ends_with("/libjvm.so") && m.entry.offset == 0).min_by_key(|m| m.entry.start)?;
    Some((m.entry.path.clone(), m.entry.start))
}

/// Reads the layout of the JVM `pid`; the error says what was missing.
pub fn read(pid: u32, mem: &Mem) -> Result<Layout, String> {
    let (path, bias) = libjvm(pid).ok_or("no libjvm.so mapped")?;
    let data = std::fs::read(format!("/proc/{pid}/root{path}")).or_else(|_| std::fs::read(&path)).map_err(|e| format!("{path}: {e}"))?;
    let obj = object::File::parse(&*data).map_err(|e| format!("{path}: {e}"))?;
    let mut syms = HashMap::new();
    for s in obj.dynamic_symbols().chain(obj.symbols()) {
        if let Ok(n) = s.name() {
            if n.starts_with("gHotSpotVM") {
                syms.insert(n.to_string(), s.address() + bias);
            }
        }
    }
    let sym = |n: &str| -> Result<u64, String> {
        let a = syms.get(n).ok_or_else(|| format!("{path} exports no {n} (stripped?)"))?;
        mem.u64(*a)
    };
    let t = tables(mem, &sym)?;
    layout(&t)
}

fn tables(mem: &Mem, sym: &dyn Fn(&str) -> Result<u64, String>) -> Result<Tables, String> {
    let mut fields = HashMap::new();
    let mut types = HashMap::new();
    let (arr, stride) = (sym("gHotSpotVMStructs")?, sym("gHotSpotVMStructEntryArrayStride")?);
    let ts = sym("gHotSpotVMStructEntryTypeStringOffset")?;
    let (tn, fname, st, off, addr) = (
        sym("gHotSpotVMStructEntryTypeNameOffset")?,
        sym("gHotSpotVMStructEntryFieldNameOffset")?,
        sym("gHotSpotVMStructEntryIsStaticOffset")?,
        sym("gHotSpotVMStructEntryOffsetOffset")?,
        sym("gHotSpotVMStructEntryAddressOffset")?,
    );
    for e in entries(mem, arr, stride, tn)? {
        let (ty, base) = e;
        let Ok(f) = mem.cstr(mem.u64(base + fname)?) else { continue };
        let v = if mem.u32(base + st)? != 0 { mem.u64(base + addr)? } else { mem.u64(base + off)? };
        if let Ok(t) = mem.u64(base + ts).and_then(|p| if p == 0 { Ok(String::new()) } else { mem.cstr(p) }) {
            types.insert((ty.clone(), f.clone()), t);
        }
        fields.insert((ty, f), v);
    }
    let mut sizes = HashMap::new();
    let (arr, stride) = (sym("gHotSpotVMTypes")?, sym("gHotSpotVMTypeEntryArrayStride")?);
    let (tn, size) = (sym("gHotSpotVMTypeEntryTypeNameOffset")?, sym("gHotSpotVMTypeEntrySizeOffset")?);
    for (ty, base) in entries(mem, arr, stride, tn)? {
        sizes.insert(ty, mem.u64(base + size)?);
    }
    let mut ints = HashMap::new();
    let (arr, stride) = (sym("gHotSpotVMIntConstants")?, sym("gHotSpotVMIntConstantEntryArrayStride")?);
    let (name, value) = (sym("gHotSpotVMIntConstantEntryNameOffset")?, sym("gHotSpotVMIntConstantEntryValueOffset")?);
    for (n, base) in entries(mem, arr, stride, name)? {
        ints.insert(n, i64::from(mem.u32(base + value)? as i32));
    }
    Ok(Tables { fields, types, sizes, ints })
}

/// The (name, entry address) of each entry of a table ended by a null name.
fn entries(mem: &Mem, arr: u64, stride: u64, name_off: u64) -> Result<Vec<(String, u64)>, String> {
    if arr == 0 || stride == 0 {
        return Err("its layout tables are not filled in yet".into());
    }
    let mut out = Vec::new();
    for i in 0..20_000 {
        let base = arr + i * stride;
        let p = mem.u64(base + name_off)?;
        if p == 0 {
            return Ok(out);
        }
        out.push((mem.cstr(p)?, base));
    }
    Err("a layout table without its end".into())
}

fn layout(t: &Tables) -> Result<Layout, String> {
    let f = |ty: &str, field: &str| -> Result<u64, String> {
        t.fields.get(&(ty.to_string(), field.to_string())).copied().ok_or_else(|| format!("no {ty}::{field} in gHotSpotVMStructs"))
    };
    let size = |ty: &str| -> Result<u64, String> { t.sizes.get(ty).copied().ok_or_else(|| format!("no type {ty} in gHotSpotVMTypes")) };
    // JDK 17's x86_64 frame: the method slot is below the last-sp slot,
    // itself below the sender-sp slot (frame_x86.hpp); the tables give
    // the latter two only.
    let sender_sp = t.ints.get("frame::interpreter_frame_sender_sp_offset").copied().unwrap_or(-1);
    let last_sp = t.ints.get("frame::interpreter_frame_last_sp_offset").copied().unwrap_or(sender_sp - 1);
    let method = t.ints.get("frame::interpreter_frame_method_offset").copied().unwrap_or(last_sp - 1);
    Ok(Layout {
        heaps: f("CodeCache", "_heaps")?,
        array_len: f("GrowableArrayBase", "_len").or_else(|_| f("GenericGrowableArray", "_len"))?,
        array_data: f("GrowableArray<int>", "_data")?,
        heap_memory: f("CodeHeap", "_memory")?,
        heap_segmap: f("CodeHeap", "_segmap")?,
        heap_log2_segment: f("CodeHeap", "_log2_segment_size")?,
        vs_low: f("VirtualSpace", "_low")?,
        // A code heap commits more as the JIT fills it: its committed
        // top read in a launched JVM's first milliseconds left the code
        // compiled later outside it, and a compiled frame returning there
        // cut the stack (`[stack cut in JIT code];long Main.spin(long)`
        // for a quarter of a spin thread's time).
        vs_high: f("VirtualSpace", "_high_boundary").or_else(|_| f("VirtualSpace", "_high"))?,
        block_size: size("HeapBlock")?,
        block_used: f("HeapBlock::Header", "_used")?,
        blob_name: f("CodeBlob", "_name")?,
        blob_frame_complete: f("CodeBlob", "_frame_complete_offset")?,
        blob_frame_complete_len: match t.types.get(&("CodeBlob".to_string(), "_frame_complete_offset".to_string())).map(String::as_str) {
            Some("int16_t" | "short" | "u2") => 2,
            _ => 4,
        },
        blob_frame_size: f("CodeBlob", "_frame_size")?,
        blob_code: match (f("CodeBlob", "_code_begin"), f("CodeBlob", "_code_offset")) {
            (Ok(p), _) => CodeBegin::Pointer(p),
            (_, Ok(o)) => CodeBegin::Offset(o),
            (Err(e), _) => return Err(e),
        },
        blob_size: f("CodeBlob", "_size")?,
        compiled_method: f("CompiledMethod", "_method").or_else(|_| f("nmethod", "_method"))?,
        interp_code: f("AbstractInterpreter", "_code")?,
        queue_buffer: f("StubQueue", "_stub_buffer")?,
        queue_limit: f("StubQueue", "_buffer_limit")?,
        method_const: f("Method", "_constMethod")?,
        const_constants: f("ConstMethod", "_constants")?,
        const_name_index: f("ConstMethod", "_name_index")?,
        const_signature_index: f("ConstMethod", "_signature_index")?,
        pool_holder: f("ConstantPool", "_pool_holder")?,
        pool_size: size("ConstantPool")?,
        klass_name: f("Klass", "_name")?,
        symbol_length: f("Symbol", "_length")?,
        symbol_body: f("Symbol", "_body")?,
        frame_sender_sp: sender_sp,
        frame_method: method,
    })
}
