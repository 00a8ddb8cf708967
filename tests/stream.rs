//! Tests of stream.
