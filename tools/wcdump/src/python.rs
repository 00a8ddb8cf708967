//! Python frames in a dump, as the capture names them (`py::QUALNAME:FILE`
//! with the file and line): CPython's own frame chain of each thread read
//! from outside (`python::reader`, process_vm_readv, as py-spy dump reads
//! it), right after the BPF pass so that both describe nearly one moment,
//! and each run of Python frames put leafward of the
//! `_PyEval_EvalFrameDefault` call that executes it, as the capture's
//! splice puts them. Python's `threading.Thread` names replace the
//! thread's comm where Python named it.

use std::collections::HashMap;

use wallclock_capture::runtimes::python::reader::{Interpreter, PyFrame};
use wallclock_capture::runtimes::splice::{place, Rest};
use wallclock_capture::unwind::{TRUNCATED, TRUNCATED_ADDR};
use wallclock_stream::Frame;

/// One thread's Python frames, in runs, and its Python name.
#[derive(Default)]
pub struct PyThread {
    pub runs: Vec<Vec<PyFrame>>,
    pub name: Option<String>,
}

/// The Python threads of `pid` by tid; empty for a process that runs no
/// CPython the reader reads (3.9-3.15). A thread whose chain cannot be read (it changed as
/// it was read) is left with its native frames and counted in `failed`.
pub fn read(pid: u32, failed: &mut usize) -> HashMap<u32, PyThread> {
    let mut out = HashMap::new();
    let Ok(mut it) = Interpreter::find(pid) else { return out };
    let Ok(states) = it.thread_states() else { return out };
    for (tid, tstate) in states {
        let runs = it.runs(tstate).unwrap_or_else(|_| {
            *failed += 1;
            Vec::new()
        });
        let name = it.thread_name(tstate);
        out.insert(tid, PyThread { runs, name });
    }
    out
}

fn frame(f: &PyFrame) -> Frame {
    let func = wallclock_stream::names::check(&format!("py::{}:{}", f.name, f.file)).into_owned();
    let file = wallclock_stream::names::check(&f.file).into_owned();
    Frame { file: Some(file), line: f.line.and_then(|l| u32::try_from(l).ok()), ..Frame::named(func) }
}

/// `frames` (leaf first) with each run (innermost first) leafward of its
/// eval frame (before the frames inlined at that address), the k-th run
/// at the k-th `_PyEval_EvalFrameDefault` from the leaf, by the capture's
/// own splice (`splice::place`, `Rest::Cut`): runs past the eval frames
/// found (a native stack cut short) go at the root, then `[truncated]`,
/// never leafward of native code they called.
pub fn splice(frames: Vec<Frame>, runs: &[Vec<PyFrame>]) -> Vec<Frame> {
    if runs.is_empty() {
        return frames;
    }
    let n = frames.len();
    // Root first, each frame by its index in `frames`, the stack's own
    // cut marker by the capture's, so that the splice says it once.
    let native: Vec<u64> = (0..n).rev().map(|i| if frames[i].func == TRUNCATED { TRUNCATED_ADDR } else { i as u64 }).collect();
    let anchors: Vec<usize> = (0..n)
        .filter(|&i| !frames[i].inlined && !frames[i].kernel && frames[i].func.starts_with("_PyEval_EvalFrameDefault"))
        .map(|mut i| {
            while i > 0 && frames[i - 1].inlined {
                i -= 1;
            }
            n - 1 - i
        })
        .collect();
    let py: Vec<&PyFrame> = runs.iter().flatten().collect();
    let mut next = n as u64;
    let tokens: Vec<Vec<u64>> = runs
        .iter()
        .map(|r| {
            let t = (next..next + r.len() as u64).collect();
            next += r.len() as u64;
            t
        })
        .collect();
    let placed = place(&native, &anchors, Rest::Cut, tokens);
    placed
        .into_iter()
        .rev()
        .map(|t| match t {
            TRUNCATED_ADDR => Frame::named(TRUNCATED.to_string()),
            t if (t as usize) < n => frames[t as usize].clone(),
            t => frame(py[t as usize - n]),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(names: &[(&str, bool)]) -> Vec<Frame> {
        names.iter().map(|&(n, inl)| Frame { inlined: inl, ..Frame::named(n.to_string()) }).collect()
    }

    fn py(n: &str) -> PyFrame {
        PyFrame { name: n.into(), file: "a.py".into(), line: Some(1) }
    }

    fn funcs(f: &[Frame]) -> Vec<&str> {
        f.iter().map(|f| f.func.as_str()).collect()
    }

    #[test]
    fn runs_go_leafward_of_their_eval_frames() {
        let n = native(&[
            ("sleep", false),
            ("call", true),
            ("_PyEval_EvalFrameDefault", false),
            ("cfunc", false),
            ("_PyEval_EvalFrameDefault", false),
            ("main", false),
        ]);
        let got = splice(n, &[vec![py("inner")], vec![py("mid"), py("outer")]]);
        assert_eq!(
            funcs(&got),
            ["sleep", "py::inner:a.py", "call", "_PyEval_EvalFrameDefault", "cfunc", "py::mid:a.py", "py::outer:a.py", "_PyEval_EvalFrameDefault", "main"]
        );
    }

    #[test]
    fn runs_past_the_eval_frames_go_at_the_root_past_a_cut() {
        let n = native(&[("_PyEval_EvalFrameDefault", false), ("main", false)]);
        let got = splice(n, &[vec![py("a")], vec![py("b")]]);
        assert_eq!(funcs(&got), ["py::a:a.py", "_PyEval_EvalFrameDefault", "main", "[truncated]", "py::b:a.py"]);
        let cut = splice(native(&[("[truncated]", false)]), &[vec![py("a")]]);
        assert_eq!(funcs(&cut), ["[truncated]", "py::a:a.py"]);
    }
}
