//! Tests of wcreport.
