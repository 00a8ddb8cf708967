//! Capture common code (skeleton: being built)
