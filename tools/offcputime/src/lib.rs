//! offcputime (skeleton: being built)
