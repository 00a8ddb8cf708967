//! Reads of another process's memory: the capture's one reader
//! (`crate::procmem`), by the name the JVM walker has always used.

pub use crate::procmem::Mem;
