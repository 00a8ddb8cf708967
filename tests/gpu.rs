//! Tests of gpu.
