//! Where CPython keeps an asyncio task's state, per minor version (x86-64
//! release builds). Read with gdb from the DWARF of pyenv's 3.11.7, 3.12.1
//! and 3.13.0 (`p &((TaskObj*)0)->task_coro` in `_asyncio`'s .so,
//! `p &((PyCoroObject*)0)->cr_iframe`, `p (int)FRAME_SUSPENDED` in
//! libpython); fixed within a minor version, as the frame offsets of
//! crate::runtimes::python::offsets are. tests/tasks_asyncio.rs checks them against
//! running interpreters, Debian's 3.11 included.
//!
//! 3.14 and 3.15 are read from what they publish: the interpreter's
//! `_Py_DebugOffsets` (`sys.modules`, the coroutine's frame and state,
//! the frame's stack pointer) and `_asyncio`'s own table,
//! `_AsyncioDebug` (a section `.AsyncioDebug` of the `_asyncio` module:
//! 3.14's is a .so of its own, 3.15's is built into the executable),
//! which says where a Task keeps its coroutine, name and list node, and
//! where the thread states and the interpreter keep their lists of
//! Tasks (3.14 moved the C Tasks from the `_scheduled_tasks` WeakSet to
//! a linked list per thread, and the interpreter's for tasks of threads
//! that ended). What neither table says is per version: the frame
//! states (3.15 renumbered them) and where a suspended coroutine's
//! awaited object sits (3.14 `stackpointer[-1]`, 3.15 `[-2]`), read
//! from the running interpreters (`gi_frame_state` and the stack of a
//! coroutine stepped into an await, against its `cr_await`).

/// 3.14+: where the C Tasks are listed (each a `struct llist_node`
/// {next, prev}, circular, the head inside its owner).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lists {
    /// `_PyThreadStateImpl.asyncio_tasks_head`, `PyInterpreterState.asyncio_tasks_head`.
    pub tstate_head: u64,
    pub interp_head: u64,
    /// `TaskObj.task_node`.
    pub task_node: u64,
}

/// Offsets (bytes) and constants for one minor version.
#[derive(Debug, Clone, Copy)]
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
    /// 3.14+: `frame_stacktop` is the offset of `stackpointer`, a pointer
    /// past the top of the stack, and the awaited object is this many
    /// slots below it; and the Tasks are in lists (None: not read yet,
    /// or before 3.14, in the WeakSet).
    pub stack_pointer: bool,
    pub awaited_slot: u64,
    pub lists: Option<Lists>,
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
    stack_pointer: false,
    awaited_slot: 1,
    lists: None,
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
    stack_pointer: false,
    awaited_slot: 1,
    lists: None,
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
    stack_pointer: false,
    awaited_slot: 1,
    lists: None,
};

/// The layout of CPython 3.`minor`, if known (3.10's asyncio keeps its
/// frames apart from its coroutines: not read; 3.14+: [`from_debug`]).
pub fn for_minor(minor: u32) -> Option<&'static Layout> {
    match minor {
        11 => Some(&PY311),
        12 => Some(&PY312),
        13 => Some(&PY313),
        _ => None,
    }
}

/// 3.14 or 3.15 from its `_Py_DebugOffsets` (`table`, as read from the
/// start of `_PyRuntime`); the Task's part is [`Layout::add_asyncio`]'s,
/// once `_asyncio` is loaded.
pub fn from_debug(minor: u32, table: &[u8]) -> Option<Layout> {
    let l = crate::runtimes::python::offsets::debug_layout(minor)?;
    let (modules, gen_iframe, gen_state, sp) = (l.imports_modules?, l.gen_iframe?, l.gen_frame_state?, l.frame_stackpointer?);
    let w = |i: usize| table.get(i * 8..i * 8 + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
    let (created, suspended_await, executing, awaited_slot) = match minor {
        14 => (-3, -1, 0, 1),
        15 => (0, 2, 4, 2),
        _ => return None,
    };
    Some(Layout {
        minor,
        interp_modules: w(modules)?,
        all_tasks: "_scheduled_tasks",
        eager_tasks: Some("_eager_tasks"),
        coro_iframe: w(gen_iframe)?,
        coro_frame_state: w(gen_state)?,
        frame_stacktop: w(sp)?,
        created,
        suspended_await,
        executing,
        task_fut_waiter: 0,
        task_coro: 0,
        task_name: 0,
        fut_state: 0,
        stack_pointer: true,
        awaited_slot,
        lists: None,
    })
}

impl Layout {
    /// Bytes of a TaskObj read at once: up to its name.
    pub fn task_bytes(&self) -> usize {
        (self.task_name.max(self.task_coro).max(self.task_fut_waiter).max(self.fut_state) + 8) as usize
    }

    /// Bytes of a coroutine read at once: up to its frame's `stacktop`
    /// (3.14+: `stackpointer`).
    pub fn coro_bytes(&self) -> usize {
        (self.coro_iframe + self.frame_stacktop + if self.stack_pointer { 8 } else { 4 }) as usize
    }

    /// The Task's part, from `_AsyncioDebug` (13 words: task object size,
    /// task_name, task_awaited_by, task_is_task, task_awaited_by_is_set,
    /// task_coro, task_node; interpreter state size, asyncio_tasks_head;
    /// thread state size, asyncio_running_loop, asyncio_running_task,
    /// asyncio_tasks_head). A Task's `task_fut_waiter` is the word before
    /// `task_coro`, and its future's `fut_state` (an int) the four bytes
    /// before `fut_is_task` (Modules/_asynciomodule.c's TaskObj and
    /// FutureObj_HEAD). False when the table is not of that shape.
    pub fn add_asyncio(&mut self, t: &[u64; 13]) -> bool {
        let within = |size: u64, f: &[u64]| f.iter().all(|&o| o + 8 <= size) && size < 1 << 24;
        if !within(t[0], &[t[1], t[2], t[5], t[6] + 8]) || !within(t[7], &[t[8] + 8]) || !within(t[9], &[t[10], t[11], t[12] + 8]) || t[3] < 4 || t[5] < 8 {
            return false;
        }
        self.task_name = t[1];
        self.task_coro = t[5];
        self.task_fut_waiter = t[5] - 8;
        self.fut_state = t[3] - 4;
        self.lists = Some(Lists { tstate_head: t[12], interp_head: t[8], task_node: t[6] });
        true
    }
}
