//! Where CPython keeps an asyncio task's state, per minor version (x86-64
//! release builds). Read with gdb from the DWARF of pyenv's 3.11.7, 3.12.1
//! and 3.13.0 (`p &((TaskObj*)0)->task_coro` in `_asyncio`'s .so,
//! `p &((PyCoroObject*)0)->cr_iframe`, `p (int)FRAME_SUSPENDED` in
//! libpython); fixed within a minor version, as the frame offsets of
//! crate::python::offsets are. tests/tasks_asyncio.rs checks them against
//! running interpreters, Debian's 3.11 included.

/// Offsets (bytes) and constants for one minor version.
#[derive(Debug)]
pub struct Layout {
    pub minor: u32,
    /// `PyInterpreterState.modules` (3.11), `.imports.modules` (3.12+):
    /// `sys.modules`.
    pub interp_modules: u64,
    /// The `asyncio.tasks` global holding the WeakSet of scheduled tasks
    /// (`_asyncio`'s own: the module imports it from there).
    pub all_tasks: &'static str,
    /// 3.12+: the set of tasks running their first step eagerly.
    pub eager_tasks: Option<&'static str>,
    /// `PyCoroObject.cr_iframe` (the coroutine's `_PyInterpreterFrame`,
    /// inline) and `.cr_frame_state`.
    pub coro_iframe: u64,
    pub coro_frame_state: u64,
    /// `_PyInterpreterFrame.stacktop`: the awaited object of a suspended
    /// coroutine is `localsplus[stacktop - 1]` (`_PyGen_yf`).
    pub frame_stacktop: u64,
    /// `cr_frame_state` values: not started, suspended in an `await`
    /// (3.11/3.12 have one suspended state for `yield` and `await`; the
    /// awaited object is then checked to be a coroutine), running.
    pub created: i8,
    pub suspended_await: i8,
    pub executing: i8,
    /// `TaskObj.task_fut_waiter`, `.task_coro`, `.task_name`, and
    /// `FutureObj.fut_state` (`task_state` of a Task: 0 pending, 1
    /// cancelled, 2 finished).
    pub task_fut_waiter: u64,
    pub task_coro: u64,
    pub task_name: u64,
    pub fut_state: u64,
}

pub const PY311: Layout = Layout {
    minor: 11,
    interp_modules: 0x378,
    all_tasks: "_all_tasks",
    eager_tasks: None,
    coro_iframe: 0x50,
    coro_frame_state: 0x4b,
    frame_stacktop: 0x40,
    created: -2,
    suspended_await: -1,
    executing: 0,
    task_fut_waiter: 0x80,
    task_coro: 0x88,
    task_name: 0x90,
    fut_state: 0x58,
};

pub const PY312: Layout = Layout {
    minor: 12,
    interp_modules: 0x3b0,
    all_tasks: "_scheduled_tasks",
    eager_tasks: Some("_eager_tasks"),
    coro_iframe: 0x48,
    coro_frame_state: 0x43,
    frame_stacktop: 0x40,
    created: -2,
    suspended_await: -1,
    executing: 0,
    task_fut_waiter: 0x80,
    task_coro: 0x88,
    task_name: 0x90,
    fut_state: 0x58,
};

/// 3.13 packs the Task's flags into bit fields, and tells a suspension in
/// an `await` (FRAME_SUSPENDED_YIELD_FROM) from one in a `yield`.
pub const PY313: Layout = Layout {
    minor: 13,
    interp_modules: 0x1de8,
    all_tasks: "_scheduled_tasks",
    eager_tasks: Some("_eager_tasks"),
    coro_iframe: 0x48,
    coro_frame_state: 0x43,
    frame_stacktop: 0x40,
    created: -3,
    suspended_await: -1,
    executing: 0,
    task_fut_waiter: 0x70,
    task_coro: 0x78,
    task_name: 0x80,
    fut_state: 0x60,
};

/// The layout of CPython 3.`minor`, if known (3.10's asyncio keeps its
/// frames apart from its coroutines: not read).
pub fn for_minor(minor: u32) -> Option<&'static Layout> {
    match minor {
        11 => Some(&PY311),
        12 => Some(&PY312),
        13 => Some(&PY313),
        _ => None,
    }
}

impl Layout {
    /// Bytes of a TaskObj read at once: up to its name.
    pub fn task_bytes(&self) -> usize {
        (self.task_name + 8) as usize
    }

    /// Bytes of a coroutine read at once: up to its frame's `stacktop`.
    pub fn coro_bytes(&self) -> usize {
        (self.coro_iframe + self.frame_stacktop + 4) as usize
    }
}
