//! Tests of manpages.
