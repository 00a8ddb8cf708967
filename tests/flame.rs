//! Tests of flame.
