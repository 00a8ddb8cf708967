//! The GPU section: what the devices ran, for how long, and how long the
//! CPU sat waiting for them.
//!
//! Busy time is *summed activity time* (kernels + copies + memsets) per
//! device: the stream carries per-stack sums, not intervals, so kernels
//! that ran concurrently are counted once each and the figure can exceed
//! the wall time. Synchronizations are CPU time (a thread waiting for the
//! GPU); they are never part of a device's busy time. None of this enters
//! a thread's wall-clock accounting or its coverage.

use std::collections::BTreeMap;

use serde::Serialize;
use wallclock_stream::{Kind, Stack};

#[derive(Debug, Clone, Default, Serialize)]
pub struct GpuReport {
    /// Kernel + memcpy + memset ns summed over all devices.
    pub busy_ns: u64,
    /// Per device (`null`: records that named none), device order.
    pub devices: Vec<GpuDevice>,
    pub kernel_ns: u64,
    pub kernel_count: u64,
    /// Distinct kernel names.
    pub kernels: usize,
    /// The heaviest kernels by summed time (at most `--top`).
    pub top_kernels_by_ns: Vec<GpuKernel>,
    /// The most launched kernels (at most `--top`).
    pub top_kernels_by_count: Vec<GpuKernel>,
    pub memcpy: GpuCopies,
    pub memset: GpuTotal,
    pub sync: GpuSync,
    /// CUPTI's own overhead: the trailer's `gpu_cupti_overhead_ns` plus
    /// any `overhead` activity records.
    pub cupti_overhead_ns: u64,
    /// Shown, not hidden: the trailer's loss counts (the header's when the
    /// trailer has none).
    pub records_dropped: u64,
    /// Activities with no launch stack (kept under no CPU frame).
    pub unmatched: u64,
    /// Processes where libcupti was missing or incompatible.
    pub cupti_unavailable: u64,
    pub tid_mismatch: u64,
    pub bad_lines: u64,
    /// Why the GPU sat idle, per device (needs the timelines: [`crate::gpu_idle`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub idle: Vec<crate::gpu_idle::DeviceIdle>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct GpuDevice {
    pub device: Option<u32>,
    /// Summed activity time (kernel + memcpy + memset); overlaps counted twice.
    pub busy_ns: u64,
    pub kernel_ns: u64,
    pub kernel_count: u64,
    pub memcpy_ns: u64,
    pub memcpy_count: u64,
    pub memset_ns: u64,
    pub memset_count: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct GpuKernel {
    pub name: String,
    pub ns: u64,
    pub count: u64,
    /// ns / count, rounded to the nearest ns; null when the count is
    /// unknown (plain folded input).
    pub mean_ns: Option<u64>,
    /// Summed launch-call-start to kernel-start delay.
    pub launch_delay_ns: u64,
    /// launch_delay_ns / the launches that carry a delay, rounded; null
    /// when none does.
    pub mean_launch_delay_ns: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct GpuTotal {
    pub ns: u64,
    pub count: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct GpuCopies {
    pub ns: u64,
    pub count: u64,
    /// The trailer's `gpu_memcpy_bytes`.
    pub bytes: u64,
    /// Per direction (`[memcpy HtoD]`...), heaviest first.
    pub by_kind: Vec<GpuNamed>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct GpuNamed {
    pub name: String,
    pub ns: u64,
    pub count: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct GpuSync {
    /// CPU time spent waiting in synchronizations, all threads.
    pub ns: u64,
    pub count: u64,
    /// Per waiting thread, longest wait first.
    pub threads: Vec<GpuSyncThread>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct GpuSyncThread {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub ns: u64,
    pub count: u64,
}

/// What a GPU stack did: its activity and name, from `gpu` when the
/// stream carries it, else (plain folded `_[g]` lines) from the leaf.
pub fn activity_of(s: &Stack) -> (String, String) {
    let leaf = s.frames.last().map(|f| f.func.clone()).unwrap_or_default();
    match &s.gpu {
        Some(g) => (g.activity.clone(), g.name.clone().filter(|n| !n.is_empty()).unwrap_or(leaf)),
        None => {
            let act = if leaf.starts_with("[memcpy") {
                "memcpy"
            } else if leaf.starts_with("[memset") {
                "memset"
            } else if leaf.starts_with("[sync") {
                "sync"
            } else {
                "kernel"
            };
            (act.to_string(), if leaf.is_empty() { "[unknown]".to_string() } else { leaf })
        }
    }
}

/// Is this stack GPU-side work (anything but the CPU's sync wait)?
pub fn is_device_work(s: &Stack) -> bool {
    s.kind == Kind::Gpu && activity_of(s).0 != "sync"
}

/// sum / n rounded to the nearest; n > 0.
fn mean(sum: u64, n: u64) -> u64 {
    ((sum as u128 + n as u128 / 2) / n as u128) as u64
}

#[derive(Default)]
struct KAgg {
    ns: u64,
    count: u64,
    delay: u64,
    delayed: u64,
}

/// The section, or None when the input has no GPU record and no `gpu_*`
/// count (a CPU-only capture).
pub fn build(
    stacks: &[&Stack],
    comms: &BTreeMap<(u32, u32), String>,
    stats: &BTreeMap<String, u64>,
    lost: &BTreeMap<String, u64>,
    top_n: usize,
) -> Option<GpuReport> {
    let gpu: Vec<&Stack> = stacks.iter().copied().filter(|s| s.kind == Kind::Gpu).collect();
    let has_counts = stats.keys().chain(lost.keys()).any(|k| k.starts_with("gpu_"));
    if gpu.is_empty() && !has_counts {
        return None;
    }
    let mut t = Tally::default();
    for s in gpu {
        t.add(s, comms);
    }
    let mut r = t.report(top_n);
    // The trailer's counts; a stream cut before its trailer still has the header's.
    let count = |k: &str| stats.get(k).or_else(|| lost.get(k)).copied().unwrap_or(0);
    r.memcpy.bytes = count("gpu_memcpy_bytes");
    r.cupti_overhead_ns += count("gpu_cupti_overhead_ns");
    r.records_dropped = count("gpu_records_dropped");
    r.unmatched = count("gpu_unmatched");
    r.cupti_unavailable = count("gpu_cupti_unavailable");
    r.tid_mismatch = count("gpu_tid_mismatch");
    r.bad_lines = count("gpu_bad_lines");
    Some(r)
}

/// The GPU stacks summed by device, kernel name, copy kind and syncing thread.
#[derive(Default)]
struct Tally {
    devices: BTreeMap<Option<u32>, GpuDevice>,
    kernels: BTreeMap<String, KAgg>,
    copies: BTreeMap<String, GpuNamed>,
    syncs: BTreeMap<(u32, u32), GpuSyncThread>,
    overhead_ns: u64,
}

impl Tally {
    fn add(&mut self, s: &Stack, comms: &BTreeMap<(u32, u32), String>) {
        let (act, name) = activity_of(s);
        // A plain folded `_[g]` line's value is its time, not a number of
        // activities: counts are known only from stream records.
        let n = if s.gpu.is_some() { s.count } else { 0 };
        let device = s.gpu.as_ref().and_then(|g| g.device);
        let dev = || GpuDevice { device, ..Default::default() };
        match act.as_str() {
            "kernel" => {
                let d = self.devices.entry(device).or_insert_with(dev);
                d.kernel_ns += s.ns;
                d.kernel_count += n;
                let k = self.kernels.entry(name).or_default();
                k.ns += s.ns;
                k.count += n;
                if let Some(delay) = s.gpu.as_ref().and_then(|g| g.launch_delay_ns) {
                    k.delay += delay;
                    k.delayed += n;
                }
            }
            "memcpy" => {
                let d = self.devices.entry(device).or_insert_with(dev);
                d.memcpy_ns += s.ns;
                d.memcpy_count += n;
                let c = self.copies.entry(name.clone()).or_insert_with(|| GpuNamed { name, ..Default::default() });
                c.ns += s.ns;
                c.count += n;
            }
            "memset" => {
                let d = self.devices.entry(device).or_insert_with(dev);
                d.memset_ns += s.ns;
                d.memset_count += n;
            }
            "sync" => {
                let comm = comms.get(&(s.pid, s.tid)).cloned().filter(|c| !c.is_empty()).unwrap_or(s.comm.clone());
                let t = self.syncs.entry((s.pid, s.tid)).or_insert_with(|| GpuSyncThread {
                    pid: s.pid,
                    tid: s.tid,
                    comm,
                    ..Default::default()
                });
                t.ns += s.ns;
                t.count += n;
            }
            "overhead" => self.overhead_ns += s.ns,
            // An activity this report does not know: kept in the thread's
            // GPU column, not guessed into a device's busy time.
            _ => {}
        }
    }

    /// The section from the sums, kernels ranked by time and by count.
    fn report(self, top_n: usize) -> GpuReport {
        let mut r = GpuReport { cupti_overhead_ns: self.overhead_ns, ..Default::default() };
        let mut devices = self.devices;
        for d in devices.values_mut() {
            d.busy_ns = d.kernel_ns + d.memcpy_ns + d.memset_ns;
            r.busy_ns += d.busy_ns;
            r.kernel_ns += d.kernel_ns;
            r.kernel_count += d.kernel_count;
            r.memcpy.ns += d.memcpy_ns;
            r.memcpy.count += d.memcpy_count;
            r.memset.ns += d.memset_ns;
            r.memset.count += d.memset_count;
        }
        r.devices = devices.into_values().collect();
        let all: Vec<GpuKernel> = self
            .kernels
            .into_iter()
            .map(|(name, k)| GpuKernel {
                name,
                ns: k.ns,
                count: k.count,
                mean_ns: (k.count > 0).then(|| mean(k.ns, k.count)),
                launch_delay_ns: k.delay,
                mean_launch_delay_ns: (k.delayed > 0).then(|| mean(k.delay, k.delayed)),
            })
            .collect();
        r.kernels = all.len();
        // Ties broken by the other measure, then by name, so the order is stable.
        let mut by_ns = all.clone();
        by_ns.sort_by(|a, b| b.ns.cmp(&a.ns).then(b.count.cmp(&a.count)).then_with(|| a.name.cmp(&b.name)));
        by_ns.truncate(top_n);
        let mut by_count = all;
        by_count.sort_by(|a, b| b.count.cmp(&a.count).then(b.ns.cmp(&a.ns)).then_with(|| a.name.cmp(&b.name)));
        by_count.truncate(top_n);
        r.top_kernels_by_ns = by_ns;
        r.top_kernels_by_count = by_count;
        r.memcpy.by_kind = self.copies.into_values().collect();
        r.memcpy.by_kind.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.name.cmp(&b.name)));
        let mut threads: Vec<GpuSyncThread> = self.syncs.into_values().collect();
        threads.sort_by(|a, b| b.ns.cmp(&a.ns).then((a.pid, a.tid).cmp(&(b.pid, b.tid))));
        r.sync.ns = threads.iter().map(|t| t.ns).sum();
        r.sync.count = threads.iter().map(|t| t.count).sum();
        r.sync.threads = threads;
        r
    }
}
