//! stackmerge (skeleton: being built)
