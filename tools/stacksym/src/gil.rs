//! The `[GIL]` frame: time a CPython thread spends off-CPU waiting for the
//! global interpreter lock is shown as such. Every CPython from 3.x takes
//! the GIL in `take_gil` (Python/ceval_gil.c); an off-CPU stack that runs
//! through it (in the interpreter's binary or libpython) gets a `[GIL]`
//! frame just above it: under the Python function that wanted the lock,
//! over the wait itself. Only while blocked: once handed the GIL, a thread
//! still waiting for a CPU is runnable (offcputime keeps that apart, under
//! the same stack), not waiting for the GIL.
//!
//! An interpreter without symbols (Debian's python3.11: `take_gil` is
//! static and only `.dynsym` is left) leaves that frame unnamed,
//! `python3.11+0x...`. Its wait is still told by what it calls: on Linux
//! CPython's locks are semaphores, and the one `pthread_cond_timedwait` the
//! interpreter makes is take_gil's wait for the lock (`COND_TIMED_WAIT`).
//! So an unnamed frame of the interpreter right over that call is
//! take_gil.

pub use wallclock_stream::accounting::GIL_FRAME;
use wallclock_stream::{Frame, Kind, Stack, State};

/// Whether `s` is a blocked off-CPU stack (not runnable): the only kind
/// that can be waiting for the GIL.
pub fn blocked(s: &Stack) -> bool {
    s.kind == Kind::Off && s.state != Some(State::R)
}

/// Whether `f` is in the interpreter: `python3.X` or `libpython3.X.so`.
pub(crate) fn in_cpython(f: &Frame) -> bool {
    f.module.as_deref().is_some_and(|m| m.starts_with("python") || m.starts_with("libpython"))
}

/// Whether `f` is glibc's `pthread_cond_timedwait` (under any of the
/// names its versions give it).
fn cond_timedwait(f: &Frame) -> bool {
    f.module.as_deref().is_some_and(|m| m.starts_with("libc.so") || m.starts_with("libpthread"))
        && f.func.trim_start_matches('_').starts_with("pthread_cond_timedwait")
}

/// Whether `first`, the first frame of one user address of a blocked
/// stack ([`blocked`]), is CPython's `take_gil`: so named, or unnamed in
/// the interpreter with `callee` (the first frame of the next address
/// toward the leaf) its timed wait.
pub fn before(first: &Frame, callee: Option<&Frame>) -> bool {
    in_cpython(first)
        && (first.func == "take_gil" || (first.unnamed_module().is_some() && callee.is_some_and(cond_timedwait)))
}

/// The `[GIL]` frame.
pub fn frame() -> Frame {
    Frame::named(GIL_FRAME)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(kind: Kind) -> Stack {
        let mut s = Stack::new(kind, 1, 1, "python3");
        if kind == Kind::Off {
            s.state = Some(State::S);
        }
        s
    }

    #[test]
    fn only_cpythons_take_gil_while_blocked() {
        let f = |func: &str, module: &str| Frame { module: Some(module.into()), ..Frame::named(func) };
        let lib = Frame { file: Some("Python/ceval_gil.c".into()), line: Some(3), ..f("take_gil", "libpython3.12.so.1.0") };
        assert!(before(&lib, None));
        assert!(before(&f("take_gil", "python3.11"), None));
        assert!(!before(&f("take_gil", "mygame"), None));
        assert!(!before(&f("take_gil_fast", "python3.11"), None));
        assert!(!before(&f("drop_gil", "python3.11"), None));
        assert!(!before(&Frame::named("take_gil"), None));
        assert!(blocked(&stack(Kind::Off)));
        assert!(!blocked(&stack(Kind::On)));
        let runnable = Stack { state: Some(State::R), ..stack(Kind::Off) };
        assert!(!blocked(&runnable), "handed the GIL, waiting for a CPU");
        assert_eq!(frame().func, GIL_FRAME);
    }

    /// Debian's python3.11 (only .dynsym): take_gil is the unnamed
    /// interpreter frame over pthread_cond_timedwait, and only that one.
    #[test]
    fn an_unnamed_take_gil_by_its_wait() {
        let f = |func: &str, module: &str| Frame { module: Some(module.into()), ..Frame::named(func) };
        let unnamed = f("python3.11+0xf94ee", "python3.11");
        let timed = f("___pthread_cond_timedwait64", "libc.so.6");
        assert!(before(&unnamed, Some(&timed)));
        assert!(before(&unnamed, Some(&f("pthread_cond_timedwait", "libpthread.so.0"))));
        // drop_gil's untimed wait for the switch, a semaphore (a Lock), or
        // a C extension's own timed wait are not the GIL.
        assert!(!before(&unnamed, Some(&f("___pthread_cond_wait", "libc.so.6"))));
        assert!(!before(&unnamed, Some(&f("__new_sem_wait_slow64", "libc.so.6"))));
        assert!(!before(&f("_ssl.cpython-311-x86_64-linux-gnu.so+0x1234", "_ssl.cpython-311-x86_64-linux-gnu.so"), Some(&timed)));
        assert!(!before(&f("PyEval_RestoreThread", "python3.11"), Some(&timed)), "a named frame is what its name says");
        assert!(!before(&unnamed, None));
    }
}
