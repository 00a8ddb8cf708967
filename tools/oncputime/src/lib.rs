//! oncputime (skeleton: being built)
