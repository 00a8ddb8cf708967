//! stacksym (skeleton: being built)
