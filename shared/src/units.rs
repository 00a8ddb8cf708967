//! Time units: parsing `--unit` and printing durations for humans.

use std::fmt;
use std::str::FromStr;

/// A unit for folded values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Ns,
    Us,
    Ms,
}

impl Unit {
    pub fn ns(self) -> u64 {
        match self {
            Unit::Ns => 1,
            Unit::Us => 1_000,
            Unit::Ms => 1_000_000,
        }
    }

    /// `ns` in this unit, rounded to nearest.
    pub fn from_ns(self, ns: u64) -> u64 {
        let d = self.ns();
        (ns + d / 2) / d
    }
}

impl FromStr for Unit {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ns" => Ok(Unit::Ns),
            "us" | "µs" => Ok(Unit::Us),
            "ms" => Ok(Unit::Ms),
            _ => Err(format!("unknown unit {s:?}: use ns, us or ms")),
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unit::Ns => "ns",
            Unit::Us => "us",
            Unit::Ms => "ms",
        })
    }
}

/// A duration for humans: `1.25 s`, `340 ms`, `12.5 us`, `800 ns`.
pub fn human_ns(ns: u64) -> String {
    let f = ns as f64;
    let (v, u) = if ns >= 1_000_000_000 {
        (f / 1e9, "s")
    } else if ns >= 1_000_000 {
        (f / 1e6, "ms")
    } else if ns >= 1_000 {
        (f / 1e3, "us")
    } else {
        return format!("{ns} ns");
    };
    if v >= 100.0 {
        format!("{v:.0} {u}")
    } else if v >= 10.0 {
        format!("{v:.1} {u}")
    } else {
        format!("{v:.2} {u}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human() {
        assert_eq!(human_ns(800), "800 ns");
        assert_eq!(human_ns(12_500), "12.5 us");
        assert_eq!(human_ns(1_250_000_000), "1.25 s");
        assert_eq!(human_ns(340_000_000), "340 ms");
    }

    #[test]
    fn convert() {
        assert_eq!(Unit::Us.from_ns(1_499), 1);
        assert_eq!(Unit::Us.from_ns(1_500), 2);
        assert_eq!("ms".parse::<Unit>().unwrap(), Unit::Ms);
        assert!("s".parse::<Unit>().is_err());
    }
}
