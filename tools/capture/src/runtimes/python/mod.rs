//! Python (CPython) support in the capture: the interpreter's own frames
//! read where a stack is taken (`frames`: the chain walked by
//! bpf/python.bpf.h, named and spliced here, with `reader`, `offsets`,
//! `linetable`: 3.11-3.15), the `threading.Thread` names of its threads
//! (`threadname`), and what the unwinder needs to walk through the
//! code CPython generates at run time for `-X perf` (`trampoline`).

pub mod frames;
pub mod linetable;
pub mod offsets;
pub mod reader;
pub mod threadname;
pub mod trampoline;
