//! mangen (skeleton: being built)
