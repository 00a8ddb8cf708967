//! Tests of stacksym.
