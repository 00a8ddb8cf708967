//! Where CPython keeps what a stack reader needs (x86-64 release builds).
//!
//! 3.13 and later publish it themselves: `_PyRuntime` begins with
//! `_Py_DebugOffsets` (the cookie `xdebugpy`, `PY_VERSION_HEX`, then
//! sections of `uint64_t` offsets, each led by its struct's size), what
//! CPython's own remote debugging (3.14's `sys.remote_exec`,
//! `_remote_debugging`) reads. [`from_debug`] reads it from the process.
//! What changes from one minor version to the next is the table's own
//! shape (3.14 added fields to the interpreter, frame and code sections
//! and new sections; 3.15 more to the thread state and type sections):
//! [`DebugLayout`] says where each field the reader needs sits in it, per
//! minor version, read from CPython's Include/internal/
//! pycore_debug_offsets.h and checked against the tables of Debian
//! forky's 3.14.8 and 3.15.0 and pyenv's 3.13.0.
//!
//! Older ones are a table per minor version, read with gdb from the DWARF
//! of pyenv's 3.9.18, 3.10.13, 3.11.7, 3.12.1 and 3.13.0 builds (`p
//! &((PyThreadState*)0)->cframe`...); the layouts are fixed within a
//! minor version. The reader's tests check them against running
//! interpreters, Debian's 3.11 included (and [`PY313`] against what
//! 3.13.0 publishes).

/// Offsets (bytes) into CPython's runtime structures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    pub minor: u32,
    /// `_PyRuntime.interpreters.head`
    pub runtime_interpreters_head: u64,
    /// `PyInterpreterState.threads.head`
    pub interp_threads_head: u64,
    /// `PyThreadState.next`
    pub tstate_next: u64,
    /// `PyThreadState.native_thread_id` (the kernel tid; 3.11+), or
    /// (3.10) `PyThreadState.thread_id`, the thread's `pthread_t`, where
    /// glibc keeps the tid at an offset found in the process (see
    /// `Interpreter::thread_states`).
    pub tstate_native_thread_id: u64,
    pub tstate_is_pthread: bool,
    /// `PyThreadState.cframe` (3.11, 3.12: then `_PyCFrame.current_frame`),
    /// or `PyThreadState.current_frame` itself (3.13: `cframe_current` None).
    pub tstate_frame: u64,
    pub cframe_current: Option<u64>,
    /// `_PyInterpreterFrame.previous`, `.f_code` / `.f_executable`,
    /// `.prev_instr` / `.instr_ptr`, `.owner` (3.9, 3.10:
    /// `PyFrameObject.f_back`, `.f_code`, `.f_lasti`, the byte offset of
    /// its last instruction in 3.9, its index in 3.10; no owner).
    pub frame_previous: u64,
    pub frame_code: u64,
    pub frame_instr: u64,
    pub frame_owner: u64,
    /// `_PyInterpreterFrame.is_entry` (3.11 only, the byte before `owner`:
    /// the outermost frame of one `_PyEval_EvalFrameDefault` call; 3.12+
    /// mark that boundary with a frame `FRAME_OWNED_BY_CSTACK` instead).
    pub frame_is_entry: Option<u64>,
    /// `PyCodeObject.co_filename`, `.co_qualname` (3.9, 3.10: `.co_name`),
    /// `.co_firstlineno`, `.co_linetable` (3.9: `.co_lnotab`),
    /// `.co_code_adaptive` (3.9, 3.10: none).
    pub code_filename: u64,
    pub code_qualname: u64,
    pub code_firstlineno: u64,
    pub code_linetable: u64,
    pub code_adaptive: u64,
    /// sizeof(PyASCIIObject), sizeof(PyCompactUnicodeObject): where a
    /// compact string's characters begin.
    pub ascii_size: u64,
    pub compact_size: u64,
    /// `_PyInterpreterFrame.localsplus` (3.10: `PyFrameObject.f_localsplus`;
    /// a frame's arguments first) and `PyHeapTypeObject.ht_cached_keys`
    /// (the keys its instances share), for thread names (see
    /// `threadname.rs`; 3.10 reads the instance's `__dict__`, whose keys
    /// are these when it is split, so it does not use the latter).
    pub frame_localsplus: u64,
    pub heaptype_cached_keys: u64,
    /// Low bits of `f_executable` that are a tag, not the address (3.14+:
    /// a `_PyStackRef`, bit 0 for a deferred reference).
    pub code_tag_bits: u64,
}

impl Offsets {
    /// The code object a frame's code field `v` points at.
    pub fn code_ptr(&self, v: u64) -> u64 {
        v & !self.code_tag_bits
    }

    /// The older frame model (3.9, 3.10): a `PyFrameObject` per Python
    /// call, each run by a `_PyEval_EvalFrameDefault` call of its own,
    /// and code objects without qualified names.
    pub fn frame_objects(&self) -> bool {
        self.minor <= 10
    }
}

/// `_PyInterpreterFrame.owner` of a frame the C stack owns (3.12, 3.13:
/// the shim frame an entry into the interpreter pushes; 3.14+ call it
/// `FRAME_OWNED_BY_INTERPRETER`, same value, same place): not a Python
/// function, and the outer end of one `_PyEval_EvalFrameDefault` call's
/// frames. 3.14 also has `FRAME_OWNED_BY_CSTACK` = 4: every owner from 3
/// up is no Python function (CPython's traceback.c skips them alike).
pub const FRAME_OWNED_BY_CSTACK: u8 = 3;

/// Whether a frame of this `owner` runs a Python function (3.12+).
pub fn owner_is_function(owner: u8) -> bool {
    owner < FRAME_OWNED_BY_CSTACK
}

/// Where, in words from the start of `_Py_DebugOffsets`, one minor
/// version's table keeps each offset the reader needs.
#[derive(Debug, Clone, Copy)]
pub struct DebugLayout {
    pub minor: u32,
    /// Words in the table (all of it is read at once).
    pub words: usize,
    pub interpreters_head: usize,
    pub threads_head: usize,
    pub tstate_next: usize,
    pub tstate_current_frame: usize,
    pub tstate_native_thread_id: usize,
    pub frame_previous: usize,
    pub frame_executable: usize,
    pub frame_instr_ptr: usize,
    pub frame_localsplus: usize,
    pub frame_owner: usize,
    pub code_filename: usize,
    pub code_qualname: usize,
    pub code_linetable: usize,
    pub code_firstlineno: usize,
    pub code_adaptive: usize,
    /// `type_object.size`: sizeof(PyTypeObject), where a heap type's own
    /// fields begin.
    pub type_size: usize,
    pub ascii_size: usize,
    /// What the asyncio task reader needs (3.14+; crate::samplers::asyncio):
    /// `interpreter_state.imports_modules` (`sys.modules`),
    /// `interpreter_frame.stackpointer`, `gen_object.gi_iframe` and
    /// `.gi_frame_state`.
    pub imports_modules: Option<usize>,
    pub frame_stackpointer: Option<usize>,
    pub gen_iframe: Option<usize>,
    pub gen_frame_state: Option<usize>,
}

/// 3.13: runtime_state (3), interpreter_state (12: no threads_main),
/// thread_state (9), interpreter_frame (6), code_object (10), pyobject,
/// type_object, tuple, list, dict, float, long, bytes, unicode, gc.
pub const DEBUG313: DebugLayout = DebugLayout {
    minor: 13,
    words: 73,
    interpreters_head: 5,
    threads_head: 9,
    tstate_next: 21,
    tstate_current_frame: 23,
    tstate_native_thread_id: 25,
    frame_previous: 29,
    frame_executable: 30,
    frame_instr_ptr: 31,
    frame_localsplus: 32,
    frame_owner: 33,
    code_filename: 35,
    code_qualname: 37,
    code_linetable: 38,
    code_firstlineno: 39,
    code_adaptive: 43,
    type_size: 46,
    ascii_size: 70,
    imports_modules: None,
    frame_stackpointer: None,
    gen_iframe: None,
    gen_frame_state: None,
};

/// 3.14: interpreter_state gains threads_main, code_object_generation and
/// tlbc_generation (16), interpreter_frame stackpointer and tlbc_index
/// (8), code_object co_tlbc (11); set_object, gen_object (size, gi_name,
/// gi_iframe, gi_frame_state), llist_node and debugger_support sections
/// are added.
pub const DEBUG314: DebugLayout = DebugLayout {
    minor: 14,
    words: 95,
    interpreters_head: 5,
    threads_head: 9,
    tstate_next: 24,
    tstate_current_frame: 26,
    tstate_native_thread_id: 28,
    frame_previous: 32,
    frame_executable: 33,
    frame_instr_ptr: 34,
    frame_localsplus: 35,
    frame_owner: 36,
    code_filename: 40,
    code_qualname: 42,
    code_linetable: 43,
    code_firstlineno: 44,
    code_adaptive: 48,
    type_size: 52,
    ascii_size: 80,
    imports_modules: Some(12),
    frame_stackpointer: Some(37),
    gen_iframe: Some(85),
    gen_frame_state: Some(86),
};

/// 3.15: thread_state gains base_frame, last_profiled_frame and more
/// (16, then err_stackitem), type_object more fields (heap type's too),
/// gc more.
pub const DEBUG315: DebugLayout = DebugLayout {
    minor: 15,
    words: 111,
    interpreters_head: 5,
    threads_head: 9,
    tstate_next: 24,
    tstate_current_frame: 26,
    tstate_native_thread_id: 31,
    frame_previous: 40,
    frame_executable: 41,
    frame_instr_ptr: 42,
    frame_localsplus: 43,
    frame_owner: 44,
    code_filename: 48,
    code_qualname: 50,
    code_linetable: 51,
    code_firstlineno: 52,
    code_adaptive: 56,
    type_size: 60,
    ascii_size: 92,
    imports_modules: Some(12),
    frame_stackpointer: Some(45),
    gen_iframe: Some(101),
    gen_frame_state: Some(102),
};

/// The versions read by the offsets they publish.
const DEBUG_LAYOUTS: [&DebugLayout; 3] = [&DEBUG313, &DEBUG314, &DEBUG315];

/// The layout of 3.`minor`'s `_Py_DebugOffsets`, if known.
pub fn debug_layout(minor: u32) -> Option<&'static DebugLayout> {
    DEBUG_LAYOUTS.iter().find(|l| l.minor == minor).copied()
}

/// The cookie `_Py_DebugOffsets` begins with.
pub const DEBUG_COOKIE: &[u8; 8] = b"xdebugpy";

/// The offsets of 3.`minor` from its `_Py_DebugOffsets` (`table`: the
/// start of `_PyRuntime`, as little-endian words), with what the table
/// does not hold: the tid is the native one, the frame is the thread
/// state's own (no `_PyCFrame` since 3.13), no `is_entry` (3.12+ mark
/// an entry with an owned-by-the-C-stack frame), a heap type's cached
/// keys after `PyTypeObject` and its four method tables (async 4,
/// number 36, mapping 3, sequence 10, buffer 2 pointers: the limited
/// API's, fixed) and `ht_name`, `ht_slots`, `ht_qualname`, and a
/// compact string's characters two words after an ASCII one's
/// (`utf8_length`, `utf8`). Checked for what a table of another shape
/// would not hold: the cookie, this version, a free-threaded build (whose
/// frames and objects differ: not read), each offset inside its struct.
pub fn from_debug(minor: u32, table: &[u8]) -> Result<Offsets, String> {
    let l = debug_layout(minor).ok_or_else(|| format!("no layout of CPython 3.{minor}'s _Py_DebugOffsets"))?;
    if table.len() < l.words * 8 || &table[..8] != DEBUG_COOKIE {
        return Err(format!("CPython 3.{minor}: _PyRuntime does not begin with _Py_DebugOffsets"));
    }
    let w = |i: usize| u64::from_le_bytes(table[i * 8..i * 8 + 8].try_into().unwrap());
    let version = w(1);
    if version >> 24 != 3 || (version >> 16) & 0xff != u64::from(minor) {
        return Err(format!("_Py_DebugOffsets says version {version:#x}, not 3.{minor}"));
    }
    if w(2) != 0 {
        return Err(format!("CPython 3.{minor} is a free-threaded build (its frames are not read)"));
    }
    // Each section begins with its struct's size: every offset in it is
    // below that (tables of another shape fail this).
    let within = |size: usize, fields: &[usize]| fields.iter().all(|&f| w(f) < w(size)) && w(size) < 1 << 24;
    let frame_size = l.frame_previous - 1;
    let code_size = l.code_filename - 1;
    let tstate_size = l.tstate_next - 2;
    let ok = within(3, &[l.interpreters_head])
        && within(6, &[l.threads_head])
        && within(tstate_size, &[l.tstate_next, l.tstate_current_frame, l.tstate_native_thread_id])
        && within(frame_size, &[l.frame_previous, l.frame_executable, l.frame_instr_ptr, l.frame_localsplus, l.frame_owner])
        && within(code_size, &[l.code_filename, l.code_qualname, l.code_linetable, l.code_firstlineno, l.code_adaptive])
        && (32..=128).contains(&w(l.ascii_size))
        && (256..=1024).contains(&w(l.type_size));
    if !ok {
        return Err(format!("CPython 3.{minor}: its _Py_DebugOffsets is not of the shape known for 3.{minor}"));
    }
    Ok(Offsets {
        minor,
        runtime_interpreters_head: w(l.interpreters_head),
        interp_threads_head: w(l.threads_head),
        tstate_next: w(l.tstate_next),
        tstate_native_thread_id: w(l.tstate_native_thread_id),
        tstate_is_pthread: false,
        tstate_frame: w(l.tstate_current_frame),
        cframe_current: None,
        frame_previous: w(l.frame_previous),
        frame_code: w(l.frame_executable),
        frame_instr: w(l.frame_instr_ptr),
        frame_owner: w(l.frame_owner),
        frame_is_entry: None,
        code_filename: w(l.code_filename),
        code_qualname: w(l.code_qualname),
        code_firstlineno: w(l.code_firstlineno),
        code_linetable: w(l.code_linetable),
        code_adaptive: w(l.code_adaptive),
        ascii_size: w(l.ascii_size),
        compact_size: w(l.ascii_size) + 16,
        frame_localsplus: w(l.frame_localsplus),
        heaptype_cached_keys: w(l.type_size) + 8 * (4 + 36 + 3 + 10 + 2 + 3),
        code_tag_bits: if minor >= 14 { 7 } else { 0 },
    })
}

/// Read with gdb from the DWARF of pyenv's 3.9.18 (its libpython3.9 is
/// built with debug info: `p &((PyFrameObject*)0)->f_lasti`...). The
/// frame model of 3.10 (below), and the same thread state, interpreter
/// and code object offsets; `f_lasti` (a byte offset into the bytecode,
/// not 3.10's instruction index) and `f_localsplus` 8 bytes further
/// (`f_gen` before them), `co_lnotab` where 3.10 has `co_linetable`
/// (the table of `co_name`: no qualified names either), and
/// `ht_cached_keys` 8 bytes nearer (no `ht_module`).
pub const PY39: Offsets = Offsets { minor: 9, frame_instr: 104, frame_owner: 104, frame_localsplus: 360, heaptype_cached_keys: 864, ..PY310 };

/// Read with gdb from the DWARF of pyenv's 3.10.13 (`p
/// &((PyFrameObject*)0)->f_lasti`...). 3.10 has one `PyFrameObject` per
/// Python call, each run by a `_PyEval_EvalFrameDefault` call of its own.
/// `f_localsplus` (352: after `f_blockstack`, 20 `PyTryBlock`s of 12
/// bytes at 112) and `ht_cached_keys` from `offsetof` compiled against
/// its headers (include/python3.10/cpython/frameobject.h, object.h).
pub const PY310: Offsets = Offsets {
    minor: 10,
    runtime_interpreters_head: 32,
    interp_threads_head: 8,
    tstate_next: 8,
    tstate_native_thread_id: 176,
    tstate_is_pthread: true,
    tstate_frame: 24,
    cframe_current: None,
    frame_previous: 24,
    frame_code: 32,
    frame_instr: 96,
    frame_owner: 96,
    frame_is_entry: None,
    code_filename: 104,
    code_qualname: 112,
    code_firstlineno: 40,
    code_linetable: 120,
    code_adaptive: 0,
    ascii_size: 48,
    compact_size: 72,
    frame_localsplus: 352,
    heaptype_cached_keys: 872,
    code_tag_bits: 0,
};

pub const PY311: Offsets = Offsets {
    minor: 11,
    runtime_interpreters_head: 40,
    interp_threads_head: 16,
    tstate_next: 8,
    tstate_native_thread_id: 160,
    tstate_is_pthread: false,
    tstate_frame: 56,
    cframe_current: Some(8),
    frame_previous: 48,
    frame_code: 32,
    frame_instr: 56,
    frame_owner: 69,
    frame_is_entry: Some(68),
    code_filename: 112,
    code_qualname: 128,
    code_firstlineno: 72,
    code_linetable: 136,
    code_adaptive: 184,
    ascii_size: 48,
    compact_size: 72,
    frame_localsplus: 72,
    heaptype_cached_keys: 872,
    code_tag_bits: 0,
};

pub const PY312: Offsets = Offsets {
    minor: 12,
    runtime_interpreters_head: 40,
    interp_threads_head: 72,
    tstate_next: 8,
    tstate_native_thread_id: 144,
    tstate_is_pthread: false,
    tstate_frame: 56,
    cframe_current: Some(0),
    frame_previous: 8,
    frame_code: 0,
    frame_instr: 56,
    frame_owner: 70,
    frame_is_entry: None,
    code_filename: 112,
    code_qualname: 128,
    code_firstlineno: 68,
    code_linetable: 136,
    code_adaptive: 192,
    ascii_size: 40,
    compact_size: 56,
    frame_localsplus: 72,
    heaptype_cached_keys: 880,
    code_tag_bits: 0,
};

pub const PY313: Offsets = Offsets {
    minor: 13,
    runtime_interpreters_head: 632,
    interp_threads_head: 7344,
    tstate_next: 8,
    tstate_native_thread_id: 160,
    tstate_is_pthread: false,
    tstate_frame: 72,
    cframe_current: None,
    frame_previous: 8,
    frame_code: 0,
    frame_instr: 56,
    frame_owner: 70,
    frame_is_entry: None,
    code_filename: 112,
    code_qualname: 128,
    code_firstlineno: 68,
    code_linetable: 136,
    code_adaptive: 200,
    ascii_size: 40,
    compact_size: 56,
    frame_localsplus: 72,
    heaptype_cached_keys: 880,
    code_tag_bits: 0,
};

/// The versions with a table (3.13's is checked against what it
/// publishes, by which it is read).
const TABLES: [&Offsets; 5] = [&PY39, &PY310, &PY311, &PY312, &PY313];

/// The table of CPython 3.`minor`, if known.
pub fn for_minor(minor: u32) -> Option<&'static Offsets> {
    TABLES.iter().find(|o| o.minor == minor).copied()
}

/// The minor versions read, in order: each with a table or a layout of
/// its `_Py_DebugOffsets`.
pub fn minors() -> Vec<u32> {
    let mut v: Vec<u32> = TABLES.iter().map(|o| o.minor).chain(DEBUG_LAYOUTS.iter().map(|l| l.minor)).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The versions read (`3.N`): what the stream's header says
/// (`runtime_versions`) and the capture's warnings.
pub fn versions() -> Vec<String> {
    minors().into_iter().map(|m| format!("3.{m}")).collect()
}

/// The versions read, as the capture says them (`CPython 3.10-3.15`).
pub fn read_said() -> String {
    format!("CPython {}", wallclock_stream::versions_said(&versions()))
}

#[cfg(test)]
mod tests {
    /// Every version said to be read has its offsets, a table or the
    /// layout of its `_Py_DebugOffsets`, and no other has, and they
    /// follow each other (said as a range).
    #[test]
    fn every_version_read_has_its_offsets() {
        for m in 0..30 {
            let has = super::for_minor(m).is_some() || super::debug_layout(m).is_some();
            assert_eq!(has, super::minors().contains(&m), "CPython 3.{m}");
        }
        let m = super::minors();
        assert_eq!(super::read_said(), format!("CPython 3.{}-3.{}", m[0], m[m.len() - 1]));
    }
}
