//! V8's postmortem metadata: the `v8dbg_*` constants that node (or
//! libnode) exports for debuggers, read from the file's symbol table.
//! They give the heap layout this reader needs (field offsets, instance
//! types, tags, frame slots), so that it holds for the V8 the binary was
//! built with instead of a table of versions. The few places where the
//! metadata says nothing (ScopeInfo's variable part) are read by shape,
//! see heap.rs.

use std::collections::HashMap;

use object::{Object, ObjectSection, ObjectSymbol};

/// What the reader needs of the metadata, plus where the interpreter's
/// entry trampoline lies in the file (interpreted frames return there).
#[derive(Debug, Clone)]
pub struct Meta {
    pub heap_object_tag: u64,
    pub heap_object_tag_mask: u64,
    /// Bits a Smi's value is shifted by (32 without pointer compression).
    pub smi_shift: u32,
    pub off_fp_function: i64,
    /// The frame slot of an interpreted or baseline frame's bytecode.
    pub off_fp_bytecode_array: i64,
    pub map: u64,
    pub map_instance_type: u64,
    pub js_function_shared: u64,
    pub sfi_name_or_scope_info: u64,
    pub sfi_script_or_debug_info: u64,
    pub script_name: u64,
    pub script_line_ends: u64,
    pub script_source: u64,
    pub string_length: u64,
    pub seq_one_byte_chars: u64,
    pub seq_two_byte_chars: u64,
    pub cons_first: u64,
    pub cons_second: u64,
    pub thin_actual: u64,
    pub sliced_parent: u64,
    pub sliced_offset: u64,
    pub external_resource: u64,
    pub fixed_array_length: u64,
    pub fixed_array_data: u64,
    pub first_nonstring_type: u16,
    pub string_encoding_mask: u16,
    pub one_byte_string_tag: u16,
    pub string_representation_mask: u16,
    pub seq_string_tag: u16,
    pub cons_string_tag: u16,
    pub external_string_tag: u16,
    pub sliced_string_tag: u16,
    pub thin_string_tag: u16,
    pub type_js_function: u16,
    /// The first and last of JSFunction's instance types (its subtypes:
    /// class constructors, ...).
    pub js_function_types: (u16, u16),
    pub type_sfi: u16,
    pub type_scope_info: u16,
    pub type_script: u16,
    pub type_bytecode_array: u16,
    pub type_fixed_array: u16,
    /// ScopeInfo: the slot of its context-local count, and of its first
    /// variable-length slot.
    pub scopeinfo_ncontextlocals: u64,
    pub scopeinfo_first_vars: u64,
    /// Whether the start and end positions are the two slots before the
    /// first variable-length one (V8 12.8+), not found by shape.
    pub scopeinfo_fixed_positions: bool,
    /// [start, end) of `Builtins_InterpreterEntryTrampoline*` as SVMAs.
    pub trampolines: Vec<(u64, u64)>,
}

/// The symbols' values: `v8dbg_` constants are ints (4 bytes) in .data or
/// .rodata; those in .bss are 0.
fn constants(obj: &object::File) -> (HashMap<String, i64>, Vec<(u64, u64)>) {
    let mut out = HashMap::new();
    let mut tramp = Vec::new();
    let syms = obj.symbols().chain(obj.dynamic_symbols());
    for s in syms {
        let Ok(name) = s.name() else { continue };
        if name.starts_with("Builtins_InterpreterEntryTrampoline") {
            tramp.push((s.address(), s.address() + s.size().max(1)));
            continue;
        }
        let Some(key) = name.strip_prefix("v8dbg_") else { continue };
        if out.contains_key(key) {
            continue;
        }
        let Some(idx) = s.section_index() else { continue };
        let Ok(sec) = obj.section_by_index(idx) else { continue };
        let size = s.size().clamp(1, 8) as usize;
        let v = match sec.data_range(s.address(), size as u64) {
            Ok(Some(b)) => {
                let mut w = [0u8; 8];
                w[..size].copy_from_slice(b);
                // Sign-extend: frame offsets are negative.
                let shift = 64 - 8 * size as u32;
                (i64::from_le_bytes(w) << shift) >> shift
            }
            // .bss (no file data): zero.
            _ => 0,
        };
        out.insert(key.to_string(), v);
    }
    tramp.sort_unstable();
    tramp.dedup();
    (out, tramp)
}

/// The offset of field `class::f`, `f` the first of `fields` (its names,
/// newest last: V8 12 split `script_or_debug_info` into `script`, the
/// debug info moving to a side table) the metadata gives. A field's symbol
/// ends with its type, which V8 12+ spells as the C++ template
/// (`name_or_scope_info__Tagged_Object_` in 12.4,
/// `__Tagged_NameOrScopeInfoT_` in 13.6): found by class and field.
fn field(c: &HashMap<String, i64>, class: &str, fields: &[&str]) -> Result<u64, String> {
    for f in fields {
        let prefix = format!("class_{class}__{f}__");
        let mut hits: Vec<i64> = c.iter().filter(|(k, _)| k.starts_with(&prefix)).map(|(_, &v)| v).collect();
        hits.sort_unstable();
        hits.dedup();
        match hits[..] {
            [v] => return Ok(v as u64),
            [] => continue,
            _ => return Err(format!("V8 metadata gives {class}::{f} {} offsets", hits.len())),
        }
    }
    Err(format!("V8 metadata lacks v8dbg_class_{class}__{}", fields.join(" or __")))
}

impl Meta {
    /// The metadata of the ELF file `data`, or why it cannot be used.
    pub fn parse(data: &[u8]) -> Result<Meta, String> {
        let obj = object::File::parse(data).map_err(|e| format!("not an ELF file: {e}"))?;
        let (c, trampolines) = constants(&obj);
        if c.is_empty() {
            return Err("no V8 postmortem metadata (v8dbg_* symbols)".into());
        }
        let get = |k: &str| -> Result<i64, String> { c.get(k).copied().ok_or_else(|| format!("V8 metadata lacks v8dbg_{k}")) };
        let off = |k: &str| -> Result<u64, String> { get(k).map(|v| v as u64) };
        let ty = |k: &str| -> Result<u16, String> { get(k).map(|v| v as u16) };
        let field = |class: &str, fields: &[&str]| field(&c, class, fields);
        // Pointer compression halves the tagged size: its heap is read
        // differently (4-byte fields off a cage base), not supported here.
        let tagged = get("TaggedSize")?;
        if tagged != 8 {
            return Err(format!("V8 built with pointer compression (tagged size {tagged}): not supported"));
        }
        let type_js_function = ty("type_JSFunction__JS_FUNCTION_TYPE")?;
        let ncontextlocals = off("scopeinfo_idx_ncontextlocals")?;
        let first_vars = off("scopeinfo_idx_first_vars")?;
        let m = Meta {
            heap_object_tag: off("HeapObjectTag")?,
            heap_object_tag_mask: off("HeapObjectTagMask")?,
            smi_shift: (get("SmiShiftSize")? + 1) as u32,
            off_fp_function: get("off_fp_function")?,
            off_fp_bytecode_array: get("off_fp_bytecode_array")?,
            map: field("HeapObject", &["map"]).unwrap_or(0),
            map_instance_type: field("Map", &["instance_type"])?,
            js_function_shared: field("JSFunction", &["shared"])?,
            sfi_name_or_scope_info: field("SharedFunctionInfo", &["name_or_scope_info"])?,
            sfi_script_or_debug_info: field("SharedFunctionInfo", &["script_or_debug_info", "script", "raw_script"])?,
            script_name: field("Script", &["name"])?,
            script_line_ends: field("Script", &["line_ends"])?,
            script_source: field("Script", &["source"])?,
            string_length: field("String", &["length"])?,
            seq_one_byte_chars: field("SeqOneByteString", &["chars"])?,
            seq_two_byte_chars: field("SeqTwoByteString", &["chars"])?,
            cons_first: field("ConsString", &["first"])?,
            cons_second: field("ConsString", &["second"])?,
            thin_actual: field("ThinString", &["actual"])?,
            sliced_parent: field("SlicedString", &["parent"])?,
            sliced_offset: field("SlicedString", &["offset"])?,
            external_resource: field("ExternalString", &["resource"])?,
            fixed_array_length: field("FixedArrayBase", &["length"])?,
            fixed_array_data: field("FixedArray", &["data"])?,
            first_nonstring_type: ty("FirstNonstringType")?,
            string_encoding_mask: ty("StringEncodingMask")?,
            one_byte_string_tag: ty("OneByteStringTag")?,
            string_representation_mask: ty("StringRepresentationMask")?,
            seq_string_tag: ty("SeqStringTag")?,
            cons_string_tag: ty("ConsStringTag")?,
            external_string_tag: ty("ExternalStringTag")?,
            sliced_string_tag: ty("SlicedStringTag")?,
            thin_string_tag: ty("ThinStringTag")?,
            type_js_function,
            // V8 12+ says the range; before, JS_FUNCTION_TYPE and the
            // subtypes after it (class constructors, ...).
            js_function_types: match (get("FirstJSFunctionType"), get("LastJSFunctionType")) {
                (Ok(a), Ok(b)) if a <= b => (a as u16, b as u16),
                _ => (type_js_function, type_js_function + 31),
            },
            type_sfi: ty("type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE")?,
            type_scope_info: ty("type_ScopeInfo__SCOPE_INFO_TYPE")?,
            type_script: ty("type_Script__SCRIPT_TYPE")?,
            type_bytecode_array: ty("type_BytecodeArray__BYTECODE_ARRAY_TYPE")?,
            type_fixed_array: ty("type_FixedArray__FIXED_ARRAY_TYPE")?,
            scopeinfo_ncontextlocals: ncontextlocals,
            scopeinfo_first_vars: first_vars,
            // V8 12.8+ (Node 23+): the start and end positions sit in the
            // two slots after the context-local count, before the
            // variable part (flags, parameter count, local count, start,
            // end); before, they came last in it.
            scopeinfo_fixed_positions: first_vars == ncontextlocals + 3,
            trampolines,
        };
        // ScopeInfo is a HeapObject (V8 9.1+: no FixedArray parent): its
        // slots follow the map word. Older layouts are not read. (V8 12+
        // no longer lists the parents.)
        if c.contains_key("parent_ScopeInfo__FixedArray") {
            return Err("V8 older than 9.1 (ScopeInfo not a HeapObject): not supported".into());
        }
        Ok(m)
    }

    /// The value of the Smi `w`.
    pub fn smi(&self, w: u64) -> Option<i64> {
        (w & self.heap_object_tag_mask & 1 == 0).then(|| (w as i64) >> self.smi_shift)
    }

    /// Whether `w` is a tagged pointer to a heap object.
    pub fn is_heap(&self, w: u64) -> bool {
        w & self.heap_object_tag_mask == self.heap_object_tag && w > 0x1000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Node as installed here: the metadata is there and says what the
    /// reader assumes (no pointer compression, the frame slots V8 has
    /// used since 2015).
    #[test]
    fn reads_the_installed_nodes_metadata() {
        let Some(path) = ["/usr/bin/node", "/usr/bin/nodejs"].into_iter().find(|p| std::path::Path::new(p).exists()) else {
            eprintln!("SKIPPED: no node installed");
            return;
        };
        let data = std::fs::read(path).unwrap();
        let m = Meta::parse(&data).unwrap();
        assert_eq!(m.heap_object_tag, 1);
        assert_eq!(m.smi_shift, 32);
        assert_eq!(m.off_fp_function, -16);
        assert_eq!(m.off_fp_bytecode_array, -32);
        assert!(m.type_js_function > 0 && m.type_sfi > 0 && m.type_scope_info > 0);
        assert!(!m.trampolines.is_empty(), "no Builtins_InterpreterEntryTrampoline symbol");
        assert_eq!(m.smi(5u64 << 32), Some(5));
        assert!(m.is_heap(0x1234_5679) && !m.is_heap(0x1234_5678));
    }

    #[test]
    fn a_file_without_metadata_says_so() {
        let me = std::fs::read("/proc/self/exe").unwrap();
        let e = Meta::parse(&me).unwrap_err();
        assert!(e.contains("v8dbg"), "{e}");
    }
}
