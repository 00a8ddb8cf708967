//! Tests of stream.

mod util;
