//! Integration tests: one module per tool, run against the built binaries
//! (`cargo build --release --workspace` first; `scripts/test` does both).

mod util;

mod flame;
mod stackmerge;
mod stacksym;
mod stream;
mod wcreport;
mod capture;
mod gpu;
mod manpages;
