//! Tests of capture.
