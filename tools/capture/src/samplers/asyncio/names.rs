//! What a process's objects are called, read once and kept: each code
//! object's folded frame (checked again once a tick: one freed and another
//! made at its address is named anew) and each type's name; and which
//! frames are asyncio's own.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use super::objects::type_name;
use crate::runtimes::python::reader::Interpreter;

/// A code object's folded frame, and whether it is `asyncio.sleep`.
pub(super) struct Code {
    pub(super) frame: Rc<str>,
    pub(super) sleep: bool,
}

#[derive(Default)]
pub(super) struct Names {
    types: HashMap<u64, Rc<str>>,
    codes: HashMap<u64, Code>,
    /// Code objects checked this tick.
    checked: HashSet<u64>,
}

impl Names {
    /// A new tick: every code object is checked again when next met.
    pub(super) fn new_tick(&mut self) {
        self.checked.clear();
    }

    /// The folded frame of code object `code`, named as the main
    /// profile names Python frames (`py::QUALNAME:FILE`).
    pub(super) fn code(&mut self, it: &mut Interpreter, code: u64) -> Option<&Code> {
        if !self.checked.contains(&code) || !self.codes.contains_key(&code) {
            let (name, file, ..) = it.code(code).ok()?;
            let frame = wallclock_stream::names::check(&format!("py::{name}:{file}")).into_owned();
            if self.codes.get(&code).is_none_or(|c| *c.frame != *frame) {
                let sleep = name == "sleep" && file.ends_with("/asyncio/tasks.py") && stdlib_asyncio(&file);
                let frame = wallclock_stream::folded::escape(&frame).into_owned().into();
                self.codes.insert(code, Code { frame, sleep });
            }
            self.checked.insert(code);
        }
        self.codes.get(&code)
    }

    /// The name of the type at `tp` (cached: types live long).
    pub(super) fn type_name(&mut self, it: &Interpreter, tp: u64) -> Option<Rc<str>> {
        if let Some(n) = self.types.get(&tp) {
            return Some(n.clone());
        }
        let n: Rc<str> = type_name(it, tp)?.into();
        self.types.insert(tp, n.clone());
        Some(n)
    }
}

/// A frame of asyncio itself (`py::sleep:/usr/lib/python3.11/asyncio/tasks.py`:
/// a file in `asyncio/` of a `python3.N` library directory).
pub fn stdlib_asyncio(frame: &str) -> bool {
    frame.match_indices("/asyncio/").any(|(at, _)| frame[..at].rsplit('/').next().is_some_and(|d| d.starts_with("python3.")))
}

#[cfg(test)]
mod tests {
    use super::stdlib_asyncio;

    #[test]
    fn asyncios_own_frames_by_their_library_directory() {
        assert!(stdlib_asyncio("py::sleep:/usr/lib/python3.11/asyncio/tasks.py"));
        assert!(stdlib_asyncio("py::sleep:/root/.pyenv/versions/3.12.1/lib/python3.12/asyncio/tasks.py"));
        // A program that lives in a directory of that name is the program's.
        assert!(!stdlib_asyncio("py::fetch:/work/tests/programs/asyncio/workers.py"));
        assert!(!stdlib_asyncio("py::fetch:app.py"));
    }
}
