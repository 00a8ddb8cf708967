//! Tests of wcreport.

mod util;
