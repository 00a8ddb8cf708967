//! Time by the user's own function: every on- and off-CPU stack of a
//! thread goes to its innermost user frame (see [`crate::frames`]), split
//! by what happened there: on-CPU, or off-CPU in which state, in which
//! library call, for which kernel reason.

use std::collections::BTreeMap;

use serde::Serialize;
use wallclock_stream::{Frame, Kind, Stack, State};

use crate::frames::{self, Place};
use crate::modules::Modules;

#[derive(Debug, Clone, Serialize)]
pub struct FunctionTime {
    /// The innermost user frame, for display (`prog+0x1a2b (no name)`
    /// when unnamed); a synthetic frame (`[steal]`, `[short blocks]`) or
    /// `(COMM, no user stack)` when the stack has no user frame.
    pub func: String,
    /// Its module (a file path), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// The frame has no symbol (`module+0x...`).
    pub unnamed: bool,
    pub ns: u64,
    /// Percent of the thread's alive time (of on + off when alive is unknown).
    pub pct: Option<f64>,
    /// What the time was, heaviest first.
    pub parts: Vec<Part>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Part {
    /// `on`, `off` or `other` (plain folded input without kind marker).
    pub kind: Kind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
    /// The library (or system) call the function made, as the program
    /// called it (`fdatasync`, `pthread_cond_timedwait64`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// The kernel frame that says why it waited (`folio_wait_writeback`,
    /// `futex_wait`, `preempted`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub ns: u64,
    pub count: u64,
    pub pct: Option<f64>,
}

/// The parts of one stack: who (key), and what.
pub struct Who {
    pub func: String,
    pub module: Option<String>,
    pub unnamed: bool,
}

/// The innermost user function of a stack and what it was doing.
pub fn classify(s: &Stack, frames: &[Frame], comm: &str) -> (Who, Option<String>, Option<String>) {
    // The state leaf `stackmerge` adds says nothing the state does not.
    // Nor does its object's frame after it (the report's waited-on part says that).
    let funcs: Vec<&str> = frames.iter().map(|f| f.func.as_str()).collect();
    let frames = &frames[..frames.len() - usize::from(wallclock_stream::accounting::object_of(&funcs).is_some())];
    let frames: Vec<&Frame> =
        frames.iter().filter(|f| !(frames::is_synthetic(f) && State::from_leaf_name(&f.func).is_some())).collect();
    let owned: Vec<Frame> = frames.iter().map(|f| (*f).clone()).collect();
    let runnable = s.state == Some(State::R);
    let reason = if s.kind == Kind::On && !owned.last().is_some_and(|f| f.kernel) {
        None
    } else {
        frames::kernel_reason(&owned, runnable)
    };
    // A GIL wait is the call of the frame that wanted the GIL: the own
    // function is looked for above it (the unnamed take_gil under it is
    // the interpreter's, not the program's).
    let gil = owned.iter().position(|f| f.func == wallclock_stream::accounting::GIL_FRAME).unwrap_or(owned.len());
    let Some(i) = frames::user_frame(&owned[..gil]) else {
        let who = match owned.iter().find(|f| frames::is_synthetic(f)) {
            Some(f) => Who { func: f.func.clone(), module: None, unnamed: false },
            None => Who {
                func: format!("({}, no user stack)", if comm.is_empty() { "-" } else { comm }),
                module: None,
                unnamed: false,
            },
        };
        return (who, frames::syscall(&owned), reason);
    };
    // A Python program's own code is its Python functions: the innermost
    // one is the user's, and the interpreter under it is runtime (what
    // it called is the first frame out of the interpreter, or the GIL).
    if let Some(i) = owned.iter().rposition(frames::is_python) {
        let f = &owned[i];
        let who = Who { func: f.func.clone(), module: None, unnamed: false };
        let rest = &owned[i + 1..];
        let call = if rest.iter().any(|g| g.func == wallclock_stream::accounting::GIL_FRAME) {
            Some(wallclock_stream::accounting::GIL_FRAME.to_string())
        } else {
            rest.iter()
                .find(|g| !matches!(frames::place(g), Place::Kernel | Place::Synthetic) && !frames::in_interpreter(g))
                .map(frames::call_name)
                .or_else(|| frames::syscall(rest))
        };
        return (who, call, reason);
    }
    let f = &owned[i];
    let who = Who { func: frames::show(f), module: frames::module_of(f), unnamed: frames::is_unnamed(f) };
    // The call: the GIL wait (a thread's start, before its first Python
    // frame, waits there too), else the next user-space frame toward the
    // leaf, else the syscall.
    let rest = &owned[i + 1..];
    let call = if rest.iter().any(|g| g.func == wallclock_stream::accounting::GIL_FRAME) {
        Some(wallclock_stream::accounting::GIL_FRAME.to_string())
    } else {
        rest.iter()
            .find(|g| !matches!(frames::place(g), Place::Kernel | Place::Synthetic))
            .map(frames::call_name)
            .or_else(|| frames::syscall(rest))
    };
    (who, call, reason)
}

fn pct(part: u64, whole: Option<u64>) -> Option<f64> {
    whole.filter(|w| *w > 0).map(|w| part as f64 * 100.0 / w as f64)
}

type PartKey = (Kind, Option<State>, Option<String>, Option<String>);
/// Per function: who, and (ns, count) per part.
type ByFunction = BTreeMap<String, (Who, BTreeMap<PartKey, (u64, u64)>)>;

/// Every on, off and unclassified stack of a thread by its innermost user
/// function, heaviest first (ties by name); `base` is 100%.
pub fn by_function(ss: &[&Stack], comm: &str, base: Option<u64>, modules: &Modules) -> Vec<FunctionTime> {
    let mut by: ByFunction = BTreeMap::new();
    for s in ss.iter().filter(|s| s.kind != Kind::Gpu) {
        let mut frames = wallclock_stream::folded::frames_or_addresses(s).into_owned();
        for f in frames.iter_mut().filter(|f| !f.kernel) {
            if let Some(p) = frames::module_of(f).and_then(|m| modules.path(s.pid, &m)) {
                f.module = Some(p.to_string());
            }
        }
        let (who, call, reason) = classify(s, &frames, comm);
        let e = by.entry(who.func.clone()).or_insert_with(|| (who, BTreeMap::new()));
        let p = e.1.entry((s.kind, s.state, call, reason)).or_insert((0, 0));
        p.0 += s.ns;
        p.1 += s.count;
    }
    let mut v: Vec<FunctionTime> = by
        .into_values()
        .map(|(who, parts)| {
            let mut parts: Vec<Part> = parts
                .into_iter()
                .map(|((kind, state, call, reason), (ns, count))| Part {
                    kind,
                    state,
                    call,
                    reason,
                    ns,
                    count,
                    pct: pct(ns, base),
                })
                .collect();
            parts.sort_by_key(|p| std::cmp::Reverse(p.ns));
            let ns = parts.iter().map(|p| p.ns).sum();
            FunctionTime { func: who.func, module: who.module, unnamed: who.unnamed, ns, pct: pct(ns, base), parts }
        })
        .collect();
    v.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.func.cmp(&b.func)));
    v
}
