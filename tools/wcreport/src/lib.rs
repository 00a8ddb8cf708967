//! wcreport (skeleton: being built)
