//! The end of a merge: each thread's steal and unsampled on-CPU time as
//! stacks of their own, samples made ns, the filters and roles applied,
//! the stacks sorted ([`crate::order`]), any still unnamed named, and the
//! locks known by their address named by their call site
//! ([`crate::locks`]).

use std::collections::{BTreeMap, BTreeSet};

use wallclock_stream::accounting::{role_for, sampled_on_ns, samples_to_ns, scale_samples, steal_stack, STEAL_FRAME};
use wallclock_stream::fasthash::FastMap;
use wallclock_stream::{Kind, Stack, Thread};

use crate::key::{Agg, Key};
use crate::merge::{keep, Merger, ThreadKey};
use crate::named::Named;
use crate::order::{sorted, Merged};

impl Merger {
    /// Samples become ns (each thread's exact on-CPU time divided by its
    /// samples, else samples / freq), filters and roles applied.
    pub fn finish(mut self) -> Merged {
        self.count_thread_samples();
        let mut items = self.fold_named();
        self.add_steals(&mut items);
        let opts = &self.opts;
        crate::unsampled::add(
            &mut items,
            &mut self.agg,
            &mut self.interned,
            &mut self.comms,
            &self.threads,
            &self.thread_samples,
            |s| keep(s, opts),
        );
        let Merger {
            opts,
            mut header,
            threads,
            mut maps,
            mut stats,
            any_stats,
            folded_on_input,
            thread_samples,
            agg,
            interned,
            comms,
            ..
        } = self;
        let table = interned.table;
        if header.freq_hz.is_none() && folded_on_input {
            header.freq_hz = Some(opts.freq);
        }
        header.pids = header
            .pids
            .iter()
            .copied()
            .filter(|p| opts.pids.is_empty() || opts.pids.contains(p))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if !any_stats {
            stats.end_ns = header.end_ns;
        }
        let keys = to_ns(&mut items, agg, &threads, &thread_samples);
        let mut unnamed = Default::default();
        crate::symbolize::count_stacks(&table, items.iter().map(|(n, v)| (n.frames, v.ns, v.count)), &mut unnamed);
        let items = sorted(items, keys, &table, &comms);
        let threads: BTreeMap<ThreadKey, Thread> = threads
            .into_iter()
            .filter(|((pid, _, tid), _)| {
                (opts.pids.is_empty() || opts.pids.contains(pid)) && (opts.tids.is_empty() || opts.tids.contains(tid))
            })
            .map(|(k, mut t)| {
                if t.role.is_none() {
                    t.role = Some(role_for(&t));
                }
                (k, t)
            })
            .collect();
        maps.retain(|m| opts.pids.is_empty() || opts.pids.contains(&m.pid));
        let mut merged = Merged { header, threads, maps, items, stats, table, comms, unnamed, lock_objects: FastMap::default() };
        crate::symbolize::name_frames(&mut merged);
        crate::locks::name(&mut merged);
        merged
    }

    /// Each thread's samples: what its keys still to be scaled count
    /// (every record kept is summed under one, with its `scale`), added
    /// up once here rather than once per record.
    fn count_thread_samples(&mut self) {
        let mut last: Option<((u32, u32, u32), &mut u64)> = None;
        let scaled = self.named.items.iter().filter(|(n, _)| n.scale.is_some()).map(|(n, v)| ((n.pid, n.pgen, n.tid), v.count));
        let scaled = scaled.chain(self.agg.iter().filter(|(k, _)| k.scale.is_some()).map(|(k, v)| ((k.pid, k.pgen, k.tid), v.count)));
        for (who, count) in scaled {
            match &mut last {
                Some((t, n)) if *t == who => **n += count,
                _ => {
                    let n = self.thread_samples.entry(who).or_insert(0);
                    *n += count;
                    last = Some((who, n));
                }
            }
        }
    }

    /// The named stacks as items. A stack that came both by a stack id and
    /// with its frames written out has one key: summed before its samples
    /// become ns.
    fn fold_named(&mut self) -> Vec<(Named, Agg)> {
        let mut named = std::mem::take(&mut self.named);
        for (k, v) in std::mem::take(&mut self.agg) {
            match Named::of(&k) {
                Some(n) => {
                    named.add(n, v);
                }
                None => {
                    self.agg.insert(k, v);
                }
            }
        }
        named.into_items()
    }

    /// A thread's steal is one stack made from its merged record (two
    /// inputs may each carry one for the same thread): any steal stack the
    /// inputs had for such a thread is replaced by it.
    fn add_steals(&mut self, items: &mut Vec<(Named, Agg)>) {
        let steals: Vec<Stack> = self.threads.values().filter_map(steal_stack).filter(|s| keep(s, &self.opts)).collect();
        let steal_ids = self.interned.single_frame_stacks(STEAL_FRAME);
        if !steal_ids.is_empty() {
            let threads = &self.threads;
            let stale = |kind: Kind, frames: Option<u32>, who: ThreadKey| {
                kind == Kind::On
                    && frames.is_some_and(|id| steal_ids.contains(&id))
                    && threads.get(&who).is_some_and(|t| t.steal_ns.is_some())
            };
            items.retain(|(n, _)| !stale(n.kind, Some(n.frames), (n.pid, n.pgen, n.tid)));
            self.agg.retain(|k, _| !stale(k.kind, k.frames, (k.pid, k.pgen, k.tid)));
        }
        for s in steals {
            let (key, v) = self.key_of(s, None, None, None);
            // Unscaled: summed with a same key when sorted, as well as now.
            match Named::of(&key) {
                Some(n) => items.push((n, v)),
                None => self.agg.entry(key).or_default().add(v),
            }
        }
    }
}

/// Samples made ns: each thread's exact on-CPU time divided among its
/// samples, else samples / freq. The keyed stacks come back as a list.
fn to_ns(
    items: &mut [(Named, Agg)],
    agg: FastMap<Key, Agg>,
    threads: &BTreeMap<ThreadKey, Thread>,
    thread_samples: &FastMap<ThreadKey, u64>,
) -> Vec<(Key, Agg)> {
    // Each thread's exact on-CPU time and samples, looked up once per
    // run of its stacks rather than per stack.
    type OnAndSamples = (Option<u64>, Option<u64>);
    let mut last: Option<(ThreadKey, OnAndSamples)> = None;
    let mut ns_of = |who: ThreadKey, count: u64, freq: u64| {
        let (on, denom) = match last {
            Some((t, (on, denom))) if t == who => (on, denom),
            _ => {
                let t = threads.get(&who);
                let denom = t
                    .and_then(|t| t.samples)
                    .filter(|n| *n > 0)
                    .or_else(|| thread_samples.get(&who).copied());
                let on = t.and_then(sampled_on_ns);
                last = Some((who, (on, denom)));
                (on, denom)
            }
        };
        match (on, denom) {
            (Some(on), Some(n)) if n > 0 => scale_samples(on, count, n),
            _ => samples_to_ns(count, freq),
        }
    };
    for (n, v) in items.iter_mut() {
        if let Some(freq) = n.scale.take() {
            v.ns = ns_of((n.pid, n.pgen, n.tid), v.count, freq);
        }
    }
    let mut keys: Vec<(Key, Agg)> = Vec::with_capacity(agg.len());
    for (mut key, mut v) in agg {
        if let Some(freq) = key.scale.take() {
            v.ns = ns_of((key.pid, key.pgen, key.tid), v.count, freq);
        }
        keys.push((key, v));
    }
    keys
}
