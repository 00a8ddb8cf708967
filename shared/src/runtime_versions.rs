//! The runtime versions whose frames the capture reads with no flag, named
//! once: what the capture's warnings and wcreport's advice say. Each
//! reader's own table of layouts (tools/capture/src/runtimes/) is checked
//! against these by its unit tests, and each text against its list here.

use std::ops::RangeInclusive;

/// CPython 3.N, by N.
pub const CPYTHON_MINORS: RangeInclusive<u32> = 10..=15;
pub const CPYTHON: &str = "CPython 3.10-3.15";

/// PHP 8.N (the non-thread-safe builds distributions ship), by N.
pub const PHP_MINORS: &[u32] = &[2, 4];
pub const PHP: &str = "PHP 8.2 and 8.4";

/// Ruby 3.N, by N.
pub const RUBY_MINORS: &[u32] = &[1, 3, 4];
pub const RUBY: &str = "Ruby 3.1, 3.3 and 3.4";

#[cfg(test)]
mod tests {
    use super::*;

    /// "A, B and C" of `major.minor` versions.
    fn listed(major: u32, minors: &[u32]) -> String {
        let v: Vec<String> = minors.iter().map(|m| format!("{major}.{m}")).collect();
        match v.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => v.join(""),
        }
    }

    #[test]
    fn each_text_says_its_list() {
        assert_eq!(CPYTHON, format!("CPython 3.{}-3.{}", CPYTHON_MINORS.start(), CPYTHON_MINORS.end()));
        assert_eq!(PHP, format!("PHP {}", listed(8, PHP_MINORS)));
        assert_eq!(RUBY, format!("Ruby {}", listed(3, RUBY_MINORS)));
    }
}
