//! The GPU's idle gaps on its tracks of the trace: between two of its
//! activities (kernels, copies, memsets; concurrent ones merged) on one
//! device and stream, a `[GPU idle]` slice, so the eye finds at once
//! where the GPU waited for its launchers (wcreport's idle view says
//! what they did meanwhile).

use std::collections::BTreeMap;

use serde_json::{json, Value};
use wallclock_stream::{Kind, Slice};

use crate::trace_time::us;

/// The gap events; `track` gives a GPU slice's (pid, tid) track.
pub fn idle_gaps(slices: &[Slice], t0: u64, track: &dyn Fn(&Slice) -> u64) -> Vec<Value> {
    let mut by: BTreeMap<(u32, u64), Vec<(u64, u64)>> = BTreeMap::new();
    for s in slices.iter().filter(|s| s.kind == Kind::Gpu && s.gpu.as_ref().is_some_and(|g| g.activity != "sync")) {
        by.entry((s.pid, track(s))).or_default().push((s.start_ns, s.end_ns));
    }
    let mut out = Vec::new();
    for ((pid, tid), mut v) in by {
        v.sort_unstable();
        let mut end = v[0].1;
        for &(a, b) in &v[1..] {
            if a > end {
                out.push(json!({
                    "ph": "X", "name": "[GPU idle]", "cat": "gpu_idle", "cname": "grey",
                    "pid": pid, "tid": tid,
                    "ts": us(end.saturating_sub(t0)),
                    "dur": us(a - end),
                    "args": {"idle_ns": a - end},
                }));
            }
            end = end.max(b);
        }
    }
    out
}
