//! Tests of stackmerge.
