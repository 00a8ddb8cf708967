//! Tests of stackmerge.

mod util;
