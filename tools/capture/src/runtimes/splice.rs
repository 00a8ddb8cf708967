//! Interpreter frames put into a native stack: one splice for every
//! runtime whose frames are read from its own call chain (CPython's
//! `_PyEval_EvalFrameDefault`, PHP's `execute_ex`).
//!
//! An interpreter's frames come cut into runs, innermost first: what one
//! call of its loop (the anchor frame) executes. Each run goes right
//! leafward of its anchor, innermost run on the innermost anchor, so that
//! native and interpreted frames interleave as they called each other.
//!
//! Runs beyond the anchors found mean the native stack lost the frames
//! that ran them. Where every run has an anchor (CPython), those runs go
//! at the root, followed by the cut marker ([`Rest::Cut`]): the native
//! part between them and the innermost anchor is what the unwind lost.
//! Put above the outermost anchor found instead, they were leafward of
//! native code they had called (`type_caster_generic::cast` at the root
//! of a PyTorch stack, its Python callers under it, unmarked), and a
//! native stack the unwinder took for whole (a zero word read as the
//! return address) hid the cut.

use std::collections::HashMap;

/// The root of a stack whose unwind stopped short of the stack's start
/// (see [`crate::unwind::TRUNCATED`]): an address in no mapping, named in
/// the Maps record.
pub const TRUNCATED_ADDR: u64 = wallclock_stream::NAMED_ADDR_BASE | 0x10;

/// Where the runs go that no anchor frame holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rest {
    /// At the root, then the cut marker: every run has an anchor frame,
    /// so a run without one is a native stack cut short.
    Cut,
    /// Above the outermost anchor found; with none, right after the
    /// frame at this index (code that runs frames without an anchor of
    /// its own: PHP's JIT), else at the root.
    Above(Option<usize>),
}

/// `native` (root first) with each run (innermost first, its frames
/// innermost first) put leafward of its anchor frame (`anchors`: their
/// indexes in `native`, innermost first). Whether the result holds the
/// cut marker is seen by looking for [`TRUNCATED_ADDR`] in it.
pub fn place(native: &[u64], anchors: &[usize], rest: Rest, runs: Vec<Vec<u64>>) -> Vec<u64> {
    let mut at: HashMap<Option<usize>, Vec<u64>> = HashMap::new();
    let mut cut = false;
    let mut total = 0;
    for (k, run) in runs.into_iter().enumerate() {
        total += run.len();
        let i = match (anchors.get(k), rest) {
            (Some(&i), _) => Some(i),
            (None, Rest::Cut) => {
                cut = true;
                None
            }
            (None, Rest::Above(fallback)) => anchors.last().copied().or(fallback),
        };
        // Outer runs (later) go rootward of inner ones at the same frame.
        let v = at.entry(i).or_default();
        let mut r: Vec<u64> = run.into_iter().rev().collect();
        r.append(v);
        *v = r;
    }
    let mut out = Vec::with_capacity(native.len() + total + 1);
    out.extend(at.remove(&None).unwrap_or_default());
    let mut native = native.iter().copied().enumerate().peekable();
    if cut {
        out.push(TRUNCATED_ADDR);
        // The stack's own marker says the same cut.
        native.next_if(|&(_, a)| a == TRUNCATED_ADDR);
    }
    for (i, a) in native {
        out.push(a);
        if let Some(r) = at.remove(&Some(i)) {
            out.extend(r);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = TRUNCATED_ADDR;

    #[test]
    fn runs_go_above_their_anchors() {
        // root, anchor (outer), C call, anchor (inner), leaf.
        let native = [10, 11, 12, 13, 14];
        let runs = vec![vec![1, 2], vec![3]];
        for rest in [Rest::Cut, Rest::Above(None)] {
            assert_eq!(place(&native, &[3, 1], rest, runs.clone()), vec![10, 11, 3, 12, 13, 2, 1, 14]);
        }
    }

    #[test]
    fn a_run_without_its_anchor_is_a_cut_at_the_root() {
        // One anchor found for two runs: the unwind stopped at 11 (a
        // pybind11 frame, taken for a root), the outer run called it.
        let native = [11, 12, 13, 14];
        let runs = vec![vec![1, 2], vec![3]];
        assert_eq!(place(&native, &[2], Rest::Cut, runs.clone()), vec![3, T, 11, 12, 13, 2, 1, 14]);
        // Cut short and said so: one marker.
        assert_eq!(place(&[T, 11, 12, 13], &[2], Rest::Cut, runs.clone()), vec![3, T, 11, 12, 2, 1, 13]);
        // No anchor at all (under the interpreter's own code, a leaf scan
        // taking a stale word): every run rootward of the marker.
        assert_eq!(place(&native, &[], Rest::Cut, runs.clone()), vec![3, 2, 1, T, 11, 12, 13, 14]);
        assert_eq!(place(&[], &[], Rest::Cut, runs), vec![3, 2, 1, T]);
    }

    #[test]
    fn code_without_anchors_holds_its_runs() {
        let native = [10, 11, 12, 13, 14];
        let runs = vec![vec![1, 2], vec![3]];
        // One anchor found: the outer run goes rootward of the inner.
        assert_eq!(place(&native, &[3], Rest::Above(None), runs.clone()), vec![10, 11, 12, 13, 3, 2, 1, 14]);
        // None: after the fallback frame, else at the root.
        assert_eq!(place(&native, &[], Rest::Above(Some(2)), runs.clone()), vec![10, 11, 12, 3, 2, 1, 13, 14]);
        assert_eq!(place(&native, &[], Rest::Above(None), runs), vec![3, 2, 1, 10, 11, 12, 13, 14]);
    }
}
