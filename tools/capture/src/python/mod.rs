//! Python (CPython) support in the capture: what the unwinder needs to walk
//! through the code CPython generates at run time.

pub mod trampoline;
