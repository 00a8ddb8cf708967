//! The trace's time unit: Chrome's trace-event format counts µs.

use serde_json::Value;

/// ns as µs with three decimals, exact.
pub(crate) fn us(ns: u64) -> Value {
    let text = format!("{}.{:03}", ns / 1000, ns % 1000);
    serde_json::from_str(&text).unwrap_or(Value::Null)
}
