//! The report's parts that its sections build and print: a process's and
//! a thread's accounting, their heaviest stacks, the window.

use serde::Serialize;
use wallclock_stream::{State, StateNs};

use crate::functions::FunctionTime;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Window {
    pub start_ns: Option<u64>,
    pub end_ns: Option<u64>,
    pub wall_ns: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProcessReport {
    pub pid: u32,
    /// The process's generation under its pid (`pgen` of the stream: a
    /// pid used again within the capture); absent for the first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pgen: Option<u32>,
    /// The main thread's name (the name after exec), else its threads' most common.
    pub comm: String,
    pub threads: usize,
    /// Wall time of the window (or of its threads' lives).
    pub wall_ns: Option<u64>,
    /// Sum of the threads' alive time: thread-seconds, in ns.
    pub thread_ns: u64,
    pub on_ns: u64,
    pub off_ns: StateNs,
    pub off_total_ns: u64,
    pub gpu_ns: u64,
    /// CPU time its threads spent waiting in GPU synchronizations.
    pub gpu_sync_ns: u64,
    pub other_ns: u64,
    /// (on + off) / thread_ns, percent.
    pub coverage_pct: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThreadReport {
    pub pid: u32,
    /// The process's generation under its pid (`pgen` of the stream: a
    /// pid used again within the capture); absent for the first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pgen: Option<u32>,
    pub tid: u32,
    pub comm: String,
    /// File-safe role (`main`, from the name...), as `flame --split-dir` uses it.
    pub role: String,
    /// Behaviour class: cpu-bound, io-bound, lock-waiting, gil-waiting, sleeping, runnable-starved, idle.
    pub class: String,
    pub start_ns: Option<u64>,
    pub end_ns: Option<u64>,
    pub alive_ns: Option<u64>,
    pub on_ns: u64,
    /// The part of `on_ns` the hypervisor took from its vCPU ("steal").
    pub steal_ns: u64,
    pub off_ns: StateNs,
    pub off_total_ns: u64,
    /// GPU work (kernels, copies, memsets) launched by this thread; not
    /// part of its wall-clock time.
    pub gpu_ns: u64,
    /// Its time waiting in GPU synchronizations (CPU time, already inside
    /// its on/off-CPU time when those were captured; never added to them).
    pub gpu_sync_ns: u64,
    /// Its off-CPU time waiting for CPython's GIL (stacks holding the
    /// `[GIL]` frame stacksym adds above `take_gil`); absent when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub gil_ns: u64,
    /// Stacks of unknown kind (plain folded input without markers).
    pub other_ns: u64,
    /// (on + off) / alive, percent.
    pub coverage_pct: Option<f64>,
    pub short_blocks_ns: u64,
    pub lost_stack_ns: u64,
    pub top: TopStacks,
    /// Its time by innermost user function, heaviest first (at most `--top`).
    pub functions: Vec<FunctionTime>,
    /// The time of the functions beyond `--top`, and how many they are.
    pub functions_rest_ns: u64,
    pub functions_rest: usize,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct TopStacks {
    pub on: Vec<TopStack>,
    pub off: Vec<TopStack>,
    pub gpu: Vec<TopStack>,
    pub other: Vec<TopStack>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TopStack {
    /// Folded text, root first (`a;b;c`); addresses in hex when unsymbolized.
    pub stack: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
    pub ns: u64,
    pub count: u64,
    /// Percent of the thread's alive time (of on + off when alive is unknown).
    pub pct: Option<f64>,
    /// Who ended these blocks, heaviest first (off-CPU stacks of a capture
    /// with wakers).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub wakers: Vec<crate::wakers::TopWaker>,
}

pub(crate) fn pct(part: u64, whole: Option<u64>) -> Option<f64> {
    whole.filter(|w| *w > 0).map(|w| part as f64 * 100.0 / w as f64)
}

/// (pid, pgen, tid): see `wallclock_stream::pgen`.
pub type ThreadKey = (u32, u32, u32);

fn is_zero(n: &u64) -> bool {
    *n == 0
}
