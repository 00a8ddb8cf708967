//! V8's heap of a live process, read from outside (process_vm_readv):
//! a JSFunction's SharedFunctionInfo, its name (the String, or the
//! ScopeInfo that holds it once compiled), its Script's name and the line
//! and column its source starts at. Layout from the metadata (meta.rs).

use super::meta::Meta;

/// The longest name read; longer ones are cut (V8 does not cut them).
const MAX_NAME: usize = 1024;
/// The largest script source read for its line ends (when V8 has not
/// computed them: it does so lazily).
const MAX_SOURCE: usize = 64 << 20;
/// Nesting of cons strings followed.
const MAX_DEPTH: u32 = 16;
/// ScopeInfo: inline context-local names up to this count, else one
/// hashtable slot (V8's kScopeInfoMaxInlinedLocalNamesSize).
const MAX_INLINED_LOCALS: i64 = 75;

/// A function as a SharedFunctionInfo describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Func {
    /// V8's DebugName: its own name, else the name inferred from where it
    /// was assigned (`Module._compile`), else empty.
    pub name: String,
    /// Its Script (tagged), when it has one.
    pub script: Option<u64>,
    /// Where its source begins (a character offset), when known.
    pub start: Option<i64>,
}

/// A Script: its name and where each line ends.
#[derive(Debug, Clone)]
pub struct Script {
    pub name: String,
    pub line_ends: Vec<i64>,
}

impl Script {
    /// 1-based line and column of character offset `pos`, as V8 writes
    /// them in its perf map.
    pub fn line_col(&self, pos: i64) -> (i64, i64) {
        let i = self.line_ends.partition_point(|&e| e < pos);
        let line_start = if i == 0 { 0 } else { self.line_ends[i - 1] + 1 };
        (i as i64 + 1, pos - line_start + 1)
    }
}

pub struct Heap {
    pub pid: u32,
    pub m: Meta,
    /// A read found the process gone (ESRCH): what was read before is
    /// all there is.
    pub gone: std::cell::Cell<bool>,
}

impl Heap {
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Option<()> {
        if buf.is_empty() {
            return Some(());
        }
        let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
        // SAFETY: one local iovec over `buf`, which outlives the call.
        let n = unsafe { libc::process_vm_readv(self.pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
            self.gone.set(true);
        }
        (n == buf.len() as isize).then_some(())
    }

    pub fn word(&self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Some(u64::from_le_bytes(b))
    }

    /// The untagged address of heap object `o`.
    fn at(&self, o: u64, off: u64) -> u64 {
        (o & !self.m.heap_object_tag_mask) + off
    }

    /// Instance type of the map at `map` (tagged).
    pub fn map_type(&self, map: u64) -> Option<u16> {
        if !self.m.is_heap(map) {
            return None;
        }
        let mut b = [0u8; 2];
        self.read(self.at(map, self.m.map_instance_type), &mut b)?;
        Some(u16::from_le_bytes(b))
    }

    /// Instance type of heap object `o` (tagged).
    pub fn type_of(&self, o: u64) -> Option<u16> {
        if !self.m.is_heap(o) {
            return None;
        }
        self.map_type(self.word(self.at(o, self.m.map))?)
    }

    fn is_string_type(&self, t: u16) -> bool {
        t < self.m.first_nonstring_type
    }

    /// String `o` (tagged), at most `limit` characters of it, as UTF-16
    /// units.
    fn units(&self, o: u64, limit: usize, depth: u32) -> Option<Vec<u16>> {
        let t = self.type_of(o)?;
        if !self.is_string_type(t) || depth > MAX_DEPTH {
            return None;
        }
        let m = &self.m;
        let mut lb = [0u8; 4];
        self.read(self.at(o, m.string_length), &mut lb)?;
        let len = usize::try_from(i32::from_le_bytes(lb)).ok()?.min(limit);
        let one_byte = t & m.string_encoding_mask == m.one_byte_string_tag;
        let rep = t & m.string_representation_mask;
        let chars = |addr: u64| -> Option<Vec<u16>> {
            if one_byte {
                let mut b = vec![0u8; len];
                self.read(addr, &mut b)?;
                Some(b.into_iter().map(u16::from).collect())
            } else {
                let mut b = vec![0u8; len * 2];
                self.read(addr, &mut b)?;
                Some(b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect())
            }
        };
        if rep == m.seq_string_tag {
            let off = if one_byte { m.seq_one_byte_chars } else { m.seq_two_byte_chars };
            chars(self.at(o, off))
        } else if rep == m.cons_string_tag {
            let mut a = self.units(self.word(self.at(o, m.cons_first))?, len, depth + 1)?;
            if a.len() < len {
                a.extend(self.units(self.word(self.at(o, m.cons_second))?, len - a.len(), depth + 1)?);
            }
            Some(a)
        } else if rep == m.thin_string_tag {
            self.units(self.word(self.at(o, m.thin_actual))?, len, depth + 1)
        } else if rep == m.sliced_string_tag {
            let off = m.smi(self.word(self.at(o, m.sliced_offset))?)?;
            let off = usize::try_from(off).ok()?;
            let parent = self.units(self.word(self.at(o, m.sliced_parent))?, off + len, depth + 1)?;
            Some(parent.get(off..)?.to_vec())
        } else if rep == m.external_string_tag {
            // The cached pointer to the characters follows the resource
            // (node's own modules' sources are external strings).
            chars(self.word(self.at(o, m.external_resource + 8))?)
        } else {
            None
        }
    }

    pub fn string(&self, o: u64, limit: usize) -> Option<String> {
        Some(String::from_utf16_lossy(&self.units(o, limit, 0)?))
    }

    /// The SharedFunctionInfo of JSFunction `f` (tagged), with the map of
    /// `f` (the caller checks it is a JSFunction's).
    pub fn js_function(&self, f: u64) -> Option<(u64, u64)> {
        if !self.m.is_heap(f) {
            return None;
        }
        let mut b = [0u8; 8];
        self.read(self.at(f, self.m.map), &mut b)?;
        let map = u64::from_le_bytes(b);
        let sfi = self.word(self.at(f, self.m.js_function_shared))?;
        self.m.is_heap(sfi).then_some((map, sfi))
    }

    /// The words of SharedFunctionInfo `sfi` that say what it is: its map,
    /// name-or-ScopeInfo and script. A SharedFunctionInfo moved by the GC,
    /// or another made at its address, shows other words.
    pub fn sfi_words(&self, sfi: u64) -> Option<[u64; 3]> {
        let m = &self.m;
        let end = m.sfi_name_or_scope_info.max(m.sfi_script_or_debug_info).max(m.map) + 8;
        let mut b = vec![0u8; end as usize];
        self.read(self.at(sfi, 0), &mut b)?;
        let w = |o: u64| u64::from_le_bytes(b[o as usize..o as usize + 8].try_into().unwrap());
        Some([w(m.map), w(m.sfi_name_or_scope_info), w(m.sfi_script_or_debug_info)])
    }

    /// The function SharedFunctionInfo `sfi` describes, from its words.
    pub fn func(&self, words: [u64; 3]) -> Option<Func> {
        let m = &self.m;
        if self.map_type(words[0])? != m.type_sfi {
            return None;
        }
        let nos = words[1];
        let (name, start) = match self.type_of(nos) {
            Some(t) if t == m.type_scope_info => self.scope_info(nos)?,
            Some(t) if self.is_string_type(t) => (self.string(nos, MAX_NAME)?, None),
            // A Smi: no name.
            _ => (String::new(), None),
        };
        let script = words[2];
        // A heap object whose type could not be read is not taken for
        // "no script": the function would be named without its file.
        let script = match (m.is_heap(script), self.type_of(script)) {
            (true, None) => return None,
            (_, t) => (t == Some(m.type_script)).then_some(script),
        };
        Some(Func { name, script, start })
    }

    /// The name (DebugName) and start position in ScopeInfo `si`. Its
    /// variable part has no metadata: after the context locals (names
    /// then infos) come optional Smis, then the function's name (a String,
    /// or Smi 0), its slot (Smi), the inferred name (String or
    /// undefined), and the start and end positions (Smis): found by that
    /// shape.
    fn scope_info(&self, si: u64) -> Option<(String, Option<i64>)> {
        let m = &self.m;
        let base = self.at(si, m.map + 8);
        let n = m.smi(self.word(base + 8 * m.scopeinfo_ncontextlocals)?)?;
        if !(0..=1 << 20).contains(&n) {
            return None;
        }
        if m.scopeinfo_fixed_positions {
            return self.scope_info_fixed(base, n);
        }
        let first = m.scopeinfo_first_vars as i64 + if n > MAX_INLINED_LOCALS { 1 + n } else { 2 * n };
        const SPAN: usize = 12;
        let mut b = vec![0u8; SPAN * 8];
        self.read(base + 8 * first as u64, &mut b)?;
        let s: Vec<u64> = b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        for i in 0..SPAN - 4 {
            let (Some(_), Some(start), Some(end)) = (m.smi(s[i + 1]), m.smi(s[i + 3]), m.smi(s[i + 4])) else { continue };
            if !(0 <= start && start <= end) || !(m.is_heap(s[i]) || s[i] == 0) || !m.is_heap(s[i + 2]) {
                continue;
            }
            let name = if s[i] == 0 { Some(String::new()) } else { self.string(s[i], MAX_NAME) };
            let Some(name) = name else { continue };
            if !name.is_empty() {
                return Some((name, Some(start)));
            }
            // No name of its own: the inferred one (undefined: none).
            let inferred = if self.type_of(s[i + 2]).is_some_and(|t| self.is_string_type(t)) { self.string(s[i + 2], MAX_NAME)? } else { String::new() };
            return Some((inferred, Some(start)));
        }
        None
    }

    /// The name and start position in ScopeInfo `si` of V8 12.8+ (slots
    /// from `base`, `n` context locals): the start is a fixed slot; after
    /// the context locals (names, or one hashtable from 75 of them, then
    /// infos) come the saved class variable (an optional Smi), the
    /// function's name (a String, or Smi 0) and its slot (a Smi) when it
    /// has one, then the inferred name (a String, when there is one).
    fn scope_info_fixed(&self, base: u64, n: i64) -> Option<(String, Option<i64>)> {
        let m = &self.m;
        let start = m.smi(self.word(base + 8 * (m.scopeinfo_first_vars - 2))?)?;
        let start = (start >= 0).then_some(start);
        let first = m.scopeinfo_first_vars as i64 + if n >= MAX_INLINED_LOCALS { 1 + n } else { 2 * n };
        let mut b = [0u8; 4 * 8];
        self.read(base + 8 * first as u64, &mut b)?;
        let s: Vec<u64> = b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        let is_string = |w: u64| self.type_of(w).is_some_and(|t| self.is_string_type(t));
        let named = (0..2).find(|&i| (s[i] == 0 || is_string(s[i])) && m.smi(s[i + 1]).is_some());
        let inferred_at = match named {
            Some(i) if s[i] != 0 => return Some((self.string(s[i], MAX_NAME)?, start)),
            Some(i) => i + 2,
            // No function variable: the inferred name, if any, comes
            // first, or after the saved class variable.
            None => usize::from(m.smi(s[0]).is_some()),
        };
        let inferred = if is_string(s[inferred_at]) { self.string(s[inferred_at], MAX_NAME)? } else { String::new() };
        Some((inferred, start))
    }

    /// Script `sc` (tagged): its name, and its line ends (V8's, else
    /// found in its source).
    pub fn script(&self, sc: u64) -> Option<Script> {
        let m = &self.m;
        let name_obj = self.word(self.at(sc, m.script_name))?;
        let name = if self.type_of(name_obj).is_some_and(|t| self.is_string_type(t)) { self.string(name_obj, 4096)? } else { String::new() };
        let ends = self.word(self.at(sc, m.script_line_ends))?;
        let line_ends = match self.type_of(ends) {
            Some(t) if t == m.type_fixed_array => self.smis(ends)?,
            _ => line_ends(&self.units(self.word(self.at(sc, m.script_source))?, MAX_SOURCE, 0)?),
        };
        Some(Script { name, line_ends })
    }

    /// The Smis of FixedArray `a`.
    fn smis(&self, a: u64) -> Option<Vec<i64>> {
        let m = &self.m;
        let n = usize::try_from(m.smi(self.word(self.at(a, m.fixed_array_length))?)?).ok()?;
        if n > MAX_SOURCE {
            return None;
        }
        let mut b = vec![0u8; n * 8];
        self.read(self.at(a, m.fixed_array_data), &mut b)?;
        b.chunks_exact(8).map(|c| m.smi(u64::from_le_bytes(c.try_into().unwrap()))).collect()
    }
}

/// Where each line of `src` ends, as V8 counts them (a line terminator's
/// offset; `\r\n` ends at its `\n`; the last line at the source's end).
pub fn line_ends(src: &[u16]) -> Vec<i64> {
    let term = |c: u16| c == 0x0a || c == 0x0d || c == 0x2028 || c == 0x2029;
    let mut out = Vec::new();
    for (i, &c) in src.iter().enumerate() {
        if term(c) && !(c == 0x0d && src.get(i + 1) == Some(&0x0a)) {
            out.push(i as i64);
        }
    }
    if src.last().is_none_or(|&c| !term(c)) {
        out.push(src.len() as i64);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns_as_v8_counts_them() {
        let src: Vec<u16> = "'use strict';\nfunction hashLoop(n) {\r\n}\n".encode_utf16().collect();
        let s = Script { name: "a.js".into(), line_ends: line_ends(&src) };
        assert_eq!(s.line_ends, vec![13, 37, 39]);
        // `(` of hashLoop: V8's perf map says 2:18.
        assert_eq!(s.line_col(31), (2, 18));
        assert_eq!(s.line_col(0), (1, 1));
        assert_eq!(s.line_col(38), (3, 1));
        let no_newline: Vec<u16> = "ab".encode_utf16().collect();
        assert_eq!(line_ends(&no_newline), vec![2]);
    }
}
