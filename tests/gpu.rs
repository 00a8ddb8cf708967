//! Tests of gpu.

mod util;
