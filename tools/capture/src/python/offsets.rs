//! Where CPython keeps what a stack reader needs, per minor version
//! (x86-64 release builds). Read with gdb from the DWARF of pyenv's 3.11.7,
//! 3.12.1 and 3.13.0 builds (`p &((PyThreadState*)0)->cframe`...); the
//! layouts are fixed within a minor version (they are part of what
//! debuggers and profilers rely on, and 3.13 publishes them in
//! `_Py_DebugOffsets`). The reader's tests check them against running
//! interpreters, Debian's 3.11 included.

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
    /// `.prev_instr` / `.instr_ptr`, `.owner` (3.10: `PyFrameObject.f_back`,
    /// `.f_code`, `.f_lasti`, the index of its last instruction; no owner).
    pub frame_previous: u64,
    pub frame_code: u64,
    pub frame_instr: u64,
    pub frame_owner: u64,
    /// `_PyInterpreterFrame.is_entry` (3.11 only, the byte before `owner`:
    /// the outermost frame of one `_PyEval_EvalFrameDefault` call; 3.12+
    /// mark that boundary with a frame `FRAME_OWNED_BY_CSTACK` instead).
    pub frame_is_entry: Option<u64>,
    /// `PyCodeObject.co_filename`, `.co_qualname` (3.10: `.co_name`),
    /// `.co_firstlineno`, `.co_linetable`, `.co_code_adaptive` (3.10: none).
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
}

/// `_PyInterpreterFrame.owner` of a frame the C stack owns (3.12+: the
/// shim frame an entry into the interpreter pushes): not a Python function.
pub const FRAME_OWNED_BY_CSTACK: u8 = 3;

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
};

/// The table of CPython 3.`minor`, if known.
pub fn for_minor(minor: u32) -> Option<&'static Offsets> {
    match minor {
        10 => Some(&PY310),
        11 => Some(&PY311),
        12 => Some(&PY312),
        13 => Some(&PY313),
        _ => None,
    }
}
