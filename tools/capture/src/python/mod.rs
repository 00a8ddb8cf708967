//! Python (CPython) support in the capture: what the unwinder needs to walk
//! through the code CPython generates at run time (`trampoline`, used), and
//! a reader of the interpreter's own frames from outside the process
//! (`reader`, `offsets`, `linetable`: 3.11-3.13; not yet used by the
//! capture, which will need the frame chain read in BPF at switch-out).

pub mod linetable;
pub mod offsets;
pub mod reader;
pub mod trampoline;
