//! Tests of capture.

mod util;
