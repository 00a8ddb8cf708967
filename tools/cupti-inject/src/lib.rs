//! CUPTI injection library (skeleton: being built)
