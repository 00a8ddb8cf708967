//! Tests of stacksym.

mod util;
