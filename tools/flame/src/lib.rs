//! flame (skeleton: being built)
