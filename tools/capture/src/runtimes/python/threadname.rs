//! Python thread names: `threading.Thread(name=...)` lives only in the
//! Thread object (CPython 3.9-3.15 never name the OS thread), so it is
//! read from outside: `self` of the thread's outermost frame,
//! `Thread._bootstrap` (3.9, 3.10: `_bootstrap` of threading.py, its code
//! having no qualified name), its first local, then that object's
//! `_name` attribute.
//!
//! An instance's attributes are a split dictionary: the keys shared by
//! its type (`ht_cached_keys`), the values its own. Where the values are
//! differs by version: 3.11 a pointer four words before the object (the
//! dict, when one was made, three), 3.12 one tagged word three before
//! (odd: the values, less one; even: the dict), 3.13 inline after the
//! object (`tp_basicsize`), while valid. A dict made for it (someone read
//! `__dict__`) is read as a dict: split (its own values) or combined.
//! 3.9 and 3.10 always keep the attributes in a dict, pointed at from the
//! object at its type's `tp_dictoffset`; split, its keys are the type's
//! shared ones and its values its own (`ma_values`), as in 3.11+.

use super::offsets::owner_is_function;
use super::reader::Interpreter;

/// At most this many frames are walked to the outermost one.
const MAX_DEPTH: usize = 4096;
/// A keys object with more entries than this is not a Thread's.
const MAX_KEYS: u64 = 1024;
/// `PyTypeObject.tp_dictoffset` (3.10; `offsetof` against its headers;
/// 3.9's DWARF has it there too).
const TP_DICTOFFSET: u64 = 288;

impl Interpreter {
    /// The `threading.Thread` name of the thread of `tstate`, if threading
    /// started it and it runs Python now (None for the main thread, for
    /// a thread between its start and its first frame, or when any read
    /// fails).
    pub fn thread_name(&mut self, tstate: u64) -> Option<String> {
        let o = self.offsets;
        let mut f = self.u64(tstate + o.tstate_frame).ok()?;
        if let (Some(c), true) = (o.cframe_current, f != 0) {
            f = self.u64(f + c).ok()?;
        }
        let mut outer = 0;
        for _ in 0..MAX_DEPTH {
            if f == 0 {
                break;
            }
            if o.minor < 12 || owner_is_function(self.u8(f + o.frame_owner).ok()?) {
                outer = f;
            }
            f = self.u64(f + o.frame_previous).ok()?;
        }
        if outer == 0 {
            return None;
        }
        let code = o.code_ptr(self.u64(outer + o.frame_code).ok()?);
        let (name, file, ..) = self.code(code).ok()?;
        let bootstrap = if o.frame_objects() { name == "_bootstrap" && file.ends_with("/threading.py") } else { name == "Thread._bootstrap" };
        if !bootstrap {
            return None;
        }
        let thread = self.u64(outer + o.frame_localsplus).ok()?;
        // The program's own string, read from its memory: checked.
        self.str_attr(thread, "_name").map(|n| wallclock_stream::names::check(&n).into_owned())
    }

    /// The `str` attribute `name` of the instance `obj` of a class.
    fn str_attr(&self, obj: u64, name: &str) -> Option<String> {
        self.string(self.attr(obj, name)?).ok()
    }

    /// The attribute `name` of the instance `obj` of a class (the object
    /// it points at; crate::samplers::asyncio reads a WeakSet's `data` with it).
    pub(crate) fn attr(&self, obj: u64, name: &str) -> Option<u64> {
        let o = self.offsets;
        if obj < 4096 {
            return None; // not an object (the words before it are read)
        }
        let tp = self.u64(obj + 8).ok()?;
        let (values, dict) = match o.minor {
            9 | 10 => match self.u64(tp + TP_DICTOFFSET).ok()? as i64 {
                // Negative: from the end of a variable-sized object, which
                // a Thread is not.
                d if d > 0 => (0, self.u64(obj + d as u64).ok()?),
                _ => return None,
            },
            11 => match self.u64(obj - 24).ok()? {
                0 => (self.u64(obj - 32).ok()?, 0),
                d => (0, d),
            },
            12 => match self.u64(obj - 24).ok()? {
                v if v & 1 == 1 => (v + 1, 0),
                d => (0, d),
            },
            _ => {
                let inline = obj + self.u64(tp + 32).ok()?; // tp_basicsize
                // PyDictValues: capacity, size, embedded, valid, padding, values.
                if self.u8(inline + 3).ok()? == 1 {
                    (inline + 8, 0)
                } else {
                    (0, self.u64(obj - 24).ok()?)
                }
            }
        };
        let value = if values != 0 {
            let keys = self.u64(tp + o.heaptype_cached_keys).ok()?;
            let (i, _) = self.find_key(keys, name)?;
            self.u64(values + 8 * i).ok()?
        } else if dict != 0 {
            // PyDictObject: ob_refcnt, ob_type, ma_used, ma_version_tag, ma_keys, ma_values
            // (3.10 too: include/python3.10/cpython/dictobject.h).
            let keys = self.u64(dict + 32).ok()?;
            let own = self.u64(dict + 40).ok()?;
            let (i, entry_value) = self.find_key(keys, name)?;
            match own {
                0 => entry_value,
                v => self.u64(v + if o.minor >= 13 { 8 } else { 0 } + 8 * i).ok()?,
            }
        } else {
            return None;
        };
        Some(value)
    }

    /// The index of `name` in the dict keys object `keys`, and the value
    /// its entry holds (that of a combined table; 0 in a split one).
    /// 3.11+: dk_refcnt, dk_log2_size, dk_log2_index_bytes, dk_kind,
    /// dk_version, dk_usable, dk_nentries, the index table, then the
    /// entries: (key, value) when the keys are all str (kind 1, 2), else
    /// (hash, key, value).
    /// 3.9, 3.10 (Objects/dict-common.h, not installed: read with gdb from
    /// the DWARF of pyenv's 3.10.13, and 3.9.18's, the same): dk_refcnt, dk_size, dk_lookup,
    /// dk_usable, dk_nentries, the index table (dk_size indexes of 1, 2,
    /// 4 or 8 bytes, by dk_size: `DK_IXSIZE` in Objects/dictobject.c),
    /// then the entries, always (hash, key, value).
    fn find_key(&self, keys: u64, name: &str) -> Option<(u64, u64)> {
        // (entries, index table bytes, header bytes, entry size, key in it)
        let (n, index_bytes, header, size, key_at) = if self.offsets.frame_objects() {
            let slots = self.u64(keys + 8).ok()?;
            let width = match slots {
                0..=0xff => 1,
                0x100..=0xffff => 2,
                0x1_0000..=0xffff_ffff => 4,
                _ => 8,
            };
            let index_bytes = slots.saturating_mul(width);
            (self.u64(keys + 32).ok()?, index_bytes, 40, 24, 8)
        } else {
            let index_bytes = 1u64 << self.u8(keys + 9).ok()?.min(32);
            let kind = self.u8(keys + 10).ok()?;
            let (size, key_at) = if kind == 0 { (24, 8) } else { (16, 0) };
            (self.u64(keys + 24).ok()?, index_bytes, 32, size, key_at)
        };
        if n > MAX_KEYS || index_bytes > 1 << 20 {
            return None;
        }
        let entries = keys + header + index_bytes;
        (0..n).find_map(|i| {
            let e = entries + i * size;
            let k = self.u64(e + key_at).ok()?;
            (k != 0 && self.string(k).ok()? == name).then(|| (i, self.u64(e + key_at + 8).unwrap_or(0)))
        })
    }
}
