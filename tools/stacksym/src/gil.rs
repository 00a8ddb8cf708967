//! The `[GIL]` frame: time a CPython thread spends off-CPU waiting for the
//! global interpreter lock is shown as such. Every CPython from 3.x takes
//! the GIL in `take_gil` (Python/ceval_gil.c); an off-CPU stack that runs
//! through it (in the interpreter's binary or libpython) gets a `[GIL]`
//! frame just above it: under the Python function that wanted the lock,
//! over the wait itself.

use wallclock_stream::{Frame, Kind, Stack};

/// The synthetic frame's name.
pub const GIL_FRAME: &str = "[GIL]";

/// Serialized `[GIL]` frame, as the engine splices frames.
pub const GIL_JSON: &str = r#"{"func":"[GIL]"}"#;

/// Whether the serialized frame(s) `json` of one user address of `s`
/// begin with CPython's `take_gil` in an off-CPU stack.
pub fn before(s: &Stack, json: &str) -> bool {
    if s.kind != Kind::Off {
        return false;
    }
    let Some(rest) = json.strip_prefix(r#"{"func":"take_gil""#) else { return false };
    // The first frame's module only (inlined frames may follow).
    let first = rest.split('}').next().unwrap_or("");
    first.split(r#""module":""#).nth(1).is_some_and(|m| m.starts_with("python") || m.starts_with("libpython"))
}

/// The `[GIL]` frame, for the binary framing.
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
        let f = r#"{"func":"take_gil","module":"libpython3.12.so.1.0","file":"Python/ceval_gil.c","line":3}"#;
        assert!(before(&stack(Kind::Off), f));
        assert!(before(&stack(Kind::Off), r#"{"func":"take_gil","module":"python3.11"}"#));
        assert!(!before(&stack(Kind::On), f));
        assert!(!before(&stack(Kind::Off), r#"{"func":"take_gil","module":"mygame"}"#));
        assert!(!before(&stack(Kind::Off), r#"{"func":"take_gil_fast","module":"python3.11"}"#));
        assert!(!before(&stack(Kind::Off), r#"{"func":"drop_gil","module":"python3.11"}"#));
        assert_eq!(serde_json::to_string(&frame()).unwrap(), GIL_JSON);
    }
}
