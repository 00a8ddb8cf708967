//! Tests of flame.

mod util;
