//! gputrace (skeleton: being built)
