//! Tests of manpages.

mod util;
