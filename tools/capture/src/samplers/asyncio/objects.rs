//! The few Python objects the task reader walks, read from outside:
//! a combined dict (`sys.modules`, a module's globals), a set's table,
//! a type's name, a small int. Layouts of 3.11-3.15 (x86-64), the same in
//! all (3.14's and 3.15's as their `_Py_DebugOffsets` give them): PyDictObject (ma_keys at 32, ma_values at 40), its keys
//! (dk_log2_index_bytes at 9, dk_kind at 10, dk_nentries at 24, the index
//! table at 32, then entries of (key, value), or (hash, key, value) when
//! a key is not a str), PySetObject (used at 24, mask at 32, table at
//! 40, entries (key, hash)), PyTypeObject.tp_name at 24.

use crate::runtimes::python::reader::Interpreter;

/// A dict or set larger than this is not read (a sanity bound on what a
/// torn read could claim).
const MAX_ENTRIES: u64 = 1 << 20;

/// The value of the str key `name` in the combined dict `dict`
/// (`sys.modules` has hundreds of keys: each one's length is compared
/// first, its text only when that matches).
pub fn dict_get(it: &Interpreter, dict: u64, name: &str) -> Option<u64> {
    let keys = it.u64(dict + 32).ok()?;
    if it.u64(dict + 40).ok()? != 0 {
        return None; // split: an instance's, not a module's
    }
    let mut head = [0u8; 32];
    it.read(keys, &mut head).ok()?;
    let index_bytes = 1u64 << head[9].min(40);
    let n = u64::from_le_bytes(head[24..32].try_into().unwrap());
    let (size, key_at) = if head[10] == 0 { (24, 8) } else { (16, 0) };
    if n > MAX_ENTRIES || index_bytes > 8 * MAX_ENTRIES {
        return None;
    }
    let mut table = vec![0u8; (n * size) as usize];
    it.read(keys + 32 + index_bytes, &mut table).ok()?;
    table.chunks_exact(size as usize).find_map(|e| {
        let word = |at: usize| u64::from_le_bytes(e[at..at + 8].try_into().unwrap());
        let k = word(key_at);
        (k != 0 && it.u64(k + 16).ok()? == name.len() as u64 && it.string(k).ok()? == name).then(|| word(key_at + 8))
    })
}

/// The keys of the set `set` (deleted entries' dummy key included: the
/// caller checks what each one points at).
pub fn set_keys(it: &Interpreter, set: u64, out: &mut Vec<u64>) -> Option<()> {
    let mut head = [0u8; 32];
    it.read(set + 16, &mut head).ok()?;
    let word = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().unwrap());
    let (used, mask, table) = (word(8), word(16), word(24));
    if used == 0 {
        return Some(());
    }
    if mask >= MAX_ENTRIES || table == 0 {
        return None;
    }
    let mut b = vec![0u8; ((mask + 1) * 16) as usize];
    it.read(table, &mut b).ok()?;
    out.extend(b.chunks_exact(16).map(|e| u64::from_le_bytes(e[..8].try_into().unwrap())).filter(|&k| k != 0));
    Some(())
}

/// A type's `tp_name` (the C string it points at, up to 64 bytes).
pub fn type_name(it: &Interpreter, tp: u64) -> Option<String> {
    let at = it.u64(tp + 24).ok()?;
    let mut b = [0u8; 64];
    // The name may end less than 64 bytes before the end of a mapping.
    if it.read(at, &mut b).is_err() {
        it.read(at, &mut b[..16]).ok()?;
    }
    let end = b.iter().position(|&c| c == 0)?;
    Some(wallclock_stream::names::check(&String::from_utf8_lossy(&b[..end])).into_owned())
}

/// A non-negative int of at most two 30-bit digits (3.13 keeps a Task's
/// default name as its number until `get_name()` formats it).
pub fn small_int(it: &Interpreter, obj: u64, minor: u32) -> Option<u64> {
    let tag = it.u64(obj + 16).ok()?;
    // 3.12+: lv_tag, the digit count shifted by 3, the sign in its low
    // bits (0 positive, 1 zero); 3.11: ob_size, the signed digit count.
    let ndigits = if minor >= 12 {
        if tag & 3 == 1 {
            return Some(0);
        }
        if tag & 3 != 0 {
            return None;
        }
        tag >> 3
    } else {
        tag
    };
    if ndigits > 2 {
        return None;
    }
    let mut b = [0u8; 8];
    it.read(obj + 24, &mut b[..4 * ndigits as usize]).ok()?;
    let d = |i: usize| u64::from(u32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap()));
    Some(d(0) | d(1) << 30)
}
