//! What naming a stack's JavaScript frames reads of V8's heap once a
//! turn, read at once: each JSFunction's map and SharedFunctionInfo,
//! each bytecode slot's map, those maps' instance types, each
//! SharedFunctionInfo's words and each Script's, one process_vm_readv
//! per step with an iovec per object (procmem::read_spans), where one
//! read per word made the reader's cost grow with the JavaScript frames
//! of a stack (Node 22's and 24's module loader has two more than 20's).
//! What a step does not read is read one by one, as before, when the
//! frame is named.

use super::Proc;

/// The word at byte `o` of `b`.
fn word(b: &[u8], o: u64) -> u64 {
    u64::from_le_bytes(b[o as usize..o as usize + 8].try_into().unwrap())
}

fn dedup(mut v: Vec<u64>) -> Vec<u64> {
    v.sort_unstable();
    v.dedup();
    v
}

impl Proc {
    fn read_spans(&self, spans: &[(u64, usize)]) -> Option<Vec<Option<Vec<u8>>>> {
        let (got, gone) = crate::procmem::read_spans(self.heap.pid, spans);
        if gone {
            self.heap.gone.set(true);
        }
        (!gone).then_some(got)
    }

    /// Reads what naming the frames whose function slots hold `fs`, and
    /// checking the bytecode slots `bs`, needs this turn and is not
    /// cached for it yet.
    pub(super) fn prefetch(&mut self, fs: &[u64], bs: &[u64]) {
        if self.heap.gone.get() {
            return;
        }
        let m = &self.heap.m;
        let mask = m.heap_object_tag_mask;
        let fresh_fs = dedup(fs.iter().copied().filter(|f| m.is_heap(*f) && !self.fn_sfi.contains_key(f)).collect());
        let fresh_bs = dedup(bs.iter().copied().filter(|b| m.is_heap(*b) && !self.types.contains_key(b)).collect());
        let fn_len = (m.map.max(m.js_function_shared) + 8) as usize;
        let spans: Vec<(u64, usize)> = fresh_fs.iter().map(|&f| (f & !mask, fn_len)).chain(fresh_bs.iter().map(|&b| ((b & !mask) + m.map, 8))).collect();
        let Some(got) = self.read_spans(&spans) else { return };
        let fwords: Vec<Option<(u64, u64)>> = got[..fresh_fs.len()].iter().map(|g| g.as_ref().map(|b| (word(b, m.map), word(b, m.js_function_shared)))).collect();
        let bmaps: Vec<Option<u64>> = got[fresh_fs.len()..].iter().map(|g| g.as_ref().map(|b| word(b, 0))).collect();
        let maps = dedup(fwords.iter().flatten().map(|&(mp, _)| mp).chain(bmaps.iter().flatten().copied()).filter(|mp| m.is_heap(*mp) && !self.map_types.contains_key(mp)).collect());
        let spans: Vec<(u64, usize)> = maps.iter().map(|&mp| ((mp & !mask) + m.map_instance_type, 2)).collect();
        let Some(got) = self.read_spans(&spans) else { return };
        for (&mp, g) in maps.iter().zip(got) {
            if let Some(b) = g {
                self.map_types.insert(mp, Some(u16::from_le_bytes([b[0], b[1]])));
            }
        }
        let m = &self.heap.m;
        let (first, last) = m.js_function_types;
        // A map that is no heap object has no type; one not read is left
        // to the one-by-one reads.
        let type_of_map = |mp: u64| if m.is_heap(mp) { self.map_types.get(&mp).copied() } else { Some(None) };
        let mut sfis = Vec::new();
        for (&f, w) in fresh_fs.iter().zip(&fwords) {
            let Some((mp, sfi)) = *w else { continue };
            let Some(t) = type_of_map(mp) else { continue };
            let s = (m.is_heap(sfi) && t.is_some_and(|t| (first..=last).contains(&t))).then_some(sfi);
            sfis.push((f, s));
        }
        let mut types = Vec::new();
        for (&b, mp) in fresh_bs.iter().zip(&bmaps) {
            let Some(t) = mp.and_then(type_of_map) else { continue };
            types.push((b, t));
        }
        for (f, s) in sfis {
            self.fn_sfi.insert(f, s);
            if let Some(sfi) = s {
                self.fn_last.insert(f, sfi);
            }
        }
        self.types.extend(types);
        self.prefetch_sfis(fs);
    }

    /// The words of the SharedFunctionInfos of `fs` not checked this
    /// turn, then those of their Scripts.
    fn prefetch_sfis(&mut self, fs: &[u64]) {
        let m = &self.heap.m;
        let mask = m.heap_object_tag_mask;
        let all = dedup(fs.iter().filter_map(|f| self.fn_sfi.get(f).copied().flatten()).collect());
        let sfis: Vec<u64> = all.iter().copied().filter(|s| !self.sfi_checked.contains(s)).collect();
        let end = (m.sfi_name_or_scope_info.max(m.sfi_script_or_debug_info).max(m.map) + 8) as usize;
        let spans: Vec<(u64, usize)> = sfis.iter().map(|&s| (s & !mask, end)).collect();
        let Some(got) = self.read_spans(&spans) else { return };
        let (map, nos, script) = (m.map, m.sfi_name_or_scope_info, m.sfi_script_or_debug_info);
        for (&sfi, g) in sfis.iter().zip(got) {
            if let Some(b) = g {
                self.check_sfi(sfi, [word(&b, map), word(&b, nos), word(&b, script)]);
            }
        }
        let m = &self.heap.m;
        let scripts = dedup(all.iter().filter_map(|s| self.sfis.get(s)?.1.as_ref()?.script).filter(|sc| !self.script_checked.contains(sc)).collect());
        let lo = m.script_name.min(m.script_source);
        let len = (m.script_name.max(m.script_source) - lo + 8) as usize;
        let spans: Vec<(u64, usize)> = scripts.iter().map(|&sc| ((sc & !m.heap_object_tag_mask) + lo, len)).collect();
        let (name, source) = (m.script_name - lo, m.script_source - lo);
        let Some(got) = self.read_spans(&spans) else { return };
        for (&sc, g) in scripts.iter().zip(got) {
            if let Some(b) = g {
                self.check_script(sc, [word(&b, name), word(&b, source)]);
            }
        }
    }
}
