//! The `[GIL]` frame: time a CPython thread spends off-CPU waiting for the
//! global interpreter lock is shown as such. Every CPython from 3.x takes
//! the GIL in `take_gil` (Python/ceval_gil.c); an off-CPU stack that runs
//! through it (in the interpreter's binary or libpython) gets a `[GIL]`
//! frame just above it: under the Python function that wanted the lock,
//! over the wait itself.

use wallclock_stream::{Frame, Kind, Stack};

/// The synthetic frame's name.
pub const GIL_FRAME: &str = "[GIL]";

/// Whether `first`, the first frame of one user address of `s`, is
/// CPython's `take_gil` in an off-CPU stack.
pub fn before(s: &Stack, first: &Frame) -> bool {
    s.kind == Kind::Off
        && first.func == "take_gil"
        && first.module.as_deref().is_some_and(|m| m.starts_with("python") || m.starts_with("libpython"))
}

/// The `[GIL]` frame.
pub fn frame() -> Frame {
    Frame::named(GIL_FRAME)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(kind: Kind) -> Stack {
        Stack::new(kind, 1, 1, "python3")
    }

    #[test]
    fn only_cpythons_take_gil_off_cpu() {
        let f = |func: &str, module: &str| Frame { module: Some(module.into()), ..Frame::named(func) };
        let lib = Frame { file: Some("Python/ceval_gil.c".into()), line: Some(3), ..f("take_gil", "libpython3.12.so.1.0") };
        assert!(before(&stack(Kind::Off), &lib));
        assert!(before(&stack(Kind::Off), &f("take_gil", "python3.11")));
        assert!(!before(&stack(Kind::On), &lib));
        assert!(!before(&stack(Kind::Off), &f("take_gil", "mygame")));
        assert!(!before(&stack(Kind::Off), &f("take_gil_fast", "python3.11")));
        assert!(!before(&stack(Kind::Off), &f("drop_gil", "python3.11")));
        assert!(!before(&stack(Kind::Off), &Frame::named("take_gil")));
        assert_eq!(frame().func, GIL_FRAME);
    }
}
