//! On-CPU time no sample fell in. A process that runs 2 ms (an `as`, a
//! `cc` driver of a build) is seldom sampled at 49 Hz, yet its exact
//! on-CPU time is in its thread record: dropping it lost 9% of a build's
//! on-CPU time from the graph while the report counted it. It goes under
//! the best stack the stream has for the thread, marked
//! `[on-CPU, not sampled]` so that no reader takes it for a sample.

use std::collections::BTreeMap;

use wallclock_stream::accounting::sampled_on_ns;
use wallclock_stream::fasthash::FastMap;
use wallclock_stream::{Frame, Kind, Stack, Thread};

use crate::intern::Interned;
use crate::key::{Agg, Comms, Key};
use crate::named::Named;

/// The leaf frame of a thread's on-CPU time that no sample fell in.
pub const NOT_SAMPLED_FRAME: &str = "[on-CPU, not sampled]";

/// A frame the code ran in (not the kernel's blocking path, not a
/// synthetic frame such as the state leaf or `[GIL]`).
fn user_frame(f: &Frame) -> bool {
    let synthetic = f.func.starts_with('[') && f.func.ends_with(']');
    !(f.kernel || synthetic)
}

/// Each unsampled thread's on-CPU time (less its steal, which has its own
/// stack) as one `on` stack of count 0 (time, not samples: a re-merge
/// keeps it as it is). Its frames are the user part of the off-CPU stack
/// the thread blocked in most often (the code that ran up to a block; of
/// equals, the first read), else none, then the marker. Stacks a previous
/// merge made are dropped first and made again from the merged thread
/// records. `named` and `agg` are the merged stacks so far.
pub(crate) fn add(
    named: &mut Vec<(Named, Agg)>,
    agg: &mut FastMap<Key, Agg>,
    interned: &mut Interned,
    comms: &mut Comms,
    threads: &BTreeMap<crate::merge::ThreadKey, Thread>,
    thread_samples: &FastMap<crate::merge::ThreadKey, u64>,
    keep: impl Fn(&Stack) -> bool,
) {
    let table = &interned.table;
    let markers: Vec<u32> =
        (0..table.frame_count() as u32).filter(|&f| table.frame(f).func == NOT_SAMPLED_FRAME).collect();
    if !markers.is_empty() && threads.values().any(|t| t.on_ns.is_some()) {
        let stale = |kind: Kind, frames: Option<u32>, who: crate::merge::ThreadKey| {
            kind == Kind::On
                && frames.is_some_and(|id| table.stack(id).last().is_some_and(|f| markers.contains(f)))
                && threads.get(&who).is_some_and(|t| t.on_ns.is_some())
        };
        named.retain(|(n, _)| !stale(n.kind, Some(n.frames), (n.pid, n.pgen, n.tid)));
        agg.retain(|k, _| !stale(k.kind, k.frames, (k.pid, k.pgen, k.tid)));
    }
    let sampled = |t: &Thread| {
        t.samples.is_some_and(|n| n > 0) || thread_samples.get(&crate::merge::thread_key(t)).is_some_and(|n| *n > 0)
    };
    let todo: Vec<&Thread> =
        threads.values().filter(|t| !sampled(t) && sampled_on_ns(t).is_some_and(|ns| ns > 0)).collect();
    if todo.is_empty() {
        return;
    }
    // The best off-CPU stack per thread: most blocks, then most time.
    let mut best: FastMap<crate::merge::ThreadKey, (u64, u64, u32)> = FastMap::default();
    let mut has_user: FastMap<u32, bool> = FastMap::default();
    let offs = named
        .iter()
        .filter(|(n, _)| n.kind == Kind::Off)
        .map(|(n, v)| ((n.pid, n.pgen, n.tid), n.frames, v))
        .chain(agg.iter().filter(|(k, _)| k.kind == Kind::Off).filter_map(|(k, v)| Some(((k.pid, k.pgen, k.tid), k.frames?, v))));
    for (who, id, v) in offs {
        let ok = *has_user.entry(id).or_insert_with(|| table.frames_of(id).any(user_frame));
        if !ok {
            continue;
        }
        let e = best.entry(who).or_insert((0, 0, id));
        if (v.count, v.ns) > (e.0, e.1) {
            *e = (v.count, v.ns, id);
        }
    }
    for t in todo {
        let mut s = Stack::new(Kind::On, t.pid, t.tid, &t.comm);
        s.pgen = t.pgen;
        if !keep(&s) {
            continue;
        }
        let t_ = &mut interned.table;
        let mut ids: Vec<u32> = match best.get(&crate::merge::thread_key(t)) {
            Some(&(_, _, id)) => t_.stack(id).iter().copied().filter(|&f| user_frame(t_.frame(f))).collect(),
            None => Vec::new(),
        };
        ids.push(t_.frame_id(&Frame::named(NOT_SAMPLED_FRAME)));
        let frames = Some(t_.stack_id(&ids));
        s.ns = sampled_on_ns(t).unwrap_or(0);
        let (key, v) = Key::of(s, frames, None, comms);
        match Named::of(&key) {
            Some(n) => named.push((n, v)),
            None => agg.entry(key).or_default().add(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{InputRole, Merger, Options};

    #[test]
    fn unsampled_time_goes_under_the_blocked_stack_marked() {
        let opts = crate::merge::tests::opts();
        let stream = br#"{"type":"header","format":"wallclock","version":"1.3","tool":"offcputime","tool_version":"0","clock":"monotonic"}
{"type":"thread","pid":7,"tid":7,"comm":"as","on_ns":2000,"steal_ns":500,"off_ns":{"R":0,"S":900,"D":0,"other":0}}
{"type":"stack","kind":"off","state":"S","pid":7,"tid":7,"comm":"as","frames":[{"func":"main"},{"func":"read"},{"func":"schedule","kernel":true}],"ns":600,"count":3}
{"type":"stack","kind":"off","state":"S","pid":7,"tid":7,"comm":"as","frames":[{"func":"main"},{"func":"exit"}],"ns":300,"count":1}
"#;
        let text = |input: &[u8]| {
            let mut m = Merger::new(&opts);
            m.read(InputRole::Off, input, "in").unwrap();
            let mut out = Vec::new();
            crate::write(&mut m.finish(), &opts, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        let folded = text(stream);
        assert!(folded.contains("as (7);main;read;[on-CPU, not sampled]_[c] 1500\n"), "{folded}");
        assert!(folded.contains("as (7);[steal]_[c] 500\n"), "{folded}");
        // Merged again (its own stream output), the time is not added twice.
        let mut m = Merger::new(&Options { folded: false, ..opts.clone() });
        m.read(InputRole::Off, &stream[..], "in").unwrap();
        let mut merged = Vec::new();
        crate::write(&mut m.finish(), &Options { folded: false, ..opts.clone() }, &mut merged).unwrap();
        assert_eq!(text(&merged), folded);
    }
}
