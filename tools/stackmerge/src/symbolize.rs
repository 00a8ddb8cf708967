//! Names for stacks that came without them (a raw `oncputime` stream given
//! as `--on on.txt`, any input that skipped `stacksym`), found in-process
//! through the stacksym library the way `stacksym` would: the streams' maps
//! records first, so a process that exited is still named, then the live
//! process. Stacks that already have frames cost nothing here.
//!
//! Also sets the trailer's `unnamed_ns:M` / `unnamed_count:M` counts from
//! the merged stacks (sampled stacks have their time only now).

use std::collections::BTreeMap;

use stacksym::{Engine, Options};
use wallclock_stream::accounting::kind_leaf;
use wallclock_stream::{Frame, Stack, UNNAMED_ADDRS, UNNAMED_COUNT, UNNAMED_NS};

use crate::finish::{Item, Merged};

fn needs(s: &Stack) -> bool {
    s.frames.is_empty() && s.stack_id.is_none() && !(s.ustack.is_empty() && s.kstack.is_empty())
}

fn waker_needs(s: &Stack) -> bool {
    fn needs(w: &wallclock_stream::Waker) -> bool {
        (w.frames.is_empty() && !(w.ustack.is_empty() && w.kstack.is_empty()))
            || w.blocked.as_ref().is_some_and(|b| {
                (b.frames.is_empty() && !(b.ustack.is_empty() && b.kstack.is_empty()))
                    || b.waker.as_deref().is_some_and(needs)
            })
    }
    s.waker.as_deref().is_some_and(needs)
}

/// The records that came without a stack table's frames.
fn full(m: &mut Merged) -> impl Iterator<Item = &mut Stack> {
    m.items.iter_mut().filter_map(|i| match i {
        Item::Full(s) => Some(&mut **s),
        Item::Named(..) => None,
    })
}

/// Name the frames of every stack that has addresses and no frames.
pub fn name_frames(m: &mut Merged) {
    if full(m).any(|s| waker_needs(s)) {
        let mut engine = Engine::new(Options { tool: "stackmerge", ..Options::default() });
        for mp in &m.maps {
            engine.add_maps(mp);
        }
        let mut woken: Vec<&mut Stack> = full(m).filter(|s| waker_needs(s)).collect();
        stacksym::name_wakers(&mut engine, &mut woken);
    }
    if full(m).any(|s| needs(s)) {
        let mut engine = Engine::new(Options { tool: "stackmerge", ..Options::default() });
        for mp in &m.maps {
            engine.add_maps(mp);
        }
        engine.prepare(full(m).filter(|s| needs(s)).map(|s| &*s));
        let mut table = std::mem::take(&mut m.table);
        for s in full(m).filter(|s| needs(s)) {
            let mut frames = engine.frames(s);
            if let Some(leaf) = kind_leaf(s) {
                frames.push(Frame::named(leaf));
            }
            if !frames.is_empty() {
                s.stack_id = Some(table.stack_of(&frames));
            }
        }
        m.table = table;
        for (k, v) in engine.take_counts().into_iter().filter(|(k, _)| k.starts_with(UNNAMED_ADDRS)) {
            *m.stats.counts.entry(k).or_insert(0) += v;
        }
    }
    count_unnamed(m);
}

/// Time and events of the stacks with unnamed frames, per module (a stack
/// once per module), replacing what the inputs said.
fn count_unnamed(m: &mut Merged) {
    let table = &m.table;
    // Each table frame's module when it is unnamed (as an index of
    // `modules`), found once per frame rather than once per stack it is in.
    let mut modules: Vec<&str> = Vec::new();
    let unnamed: Vec<u32> = (0..table.frame_count() as u32)
        .map(|f| match table.frame(f).unnamed_module() {
            Some(module) => match modules.iter().position(|&m| m == module) {
                Some(i) => i as u32,
                None => {
                    modules.push(module);
                    (modules.len() - 1) as u32
                }
            },
            None => u32::MAX,
        })
        .collect();
    let mut by_module: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    // Per module: (ns, count, in any stack).
    let mut sums = vec![(0u64, 0u64, false); modules.len()];
    let mut seen: Vec<u32> = Vec::new();
    let mut seen_names: Vec<&str> = Vec::new();
    for item in &m.items {
        let (id, s) = match item {
            Item::Named(n, v) => (Some(n.frames), (v.ns, v.count)),
            Item::Full(s) => (s.stack_id, (s.ns, s.count)),
        };
        match (id, item) {
            (Some(_), _) if modules.is_empty() => {}
            (Some(id), _) => {
                seen.clear();
                for &f in table.stack(id) {
                    let i = unnamed[f as usize];
                    if i != u32::MAX && !seen.contains(&i) {
                        seen.push(i);
                        let e = &mut sums[i as usize];
                        *e = (e.0 + s.0, e.1 + s.1, true);
                    }
                }
            }
            (None, Item::Full(st)) => {
                seen_names.clear();
                for module in st.frames.iter().filter_map(Frame::unnamed_module) {
                    if !seen_names.contains(&module) {
                        seen_names.push(module);
                        let e = by_module.entry(module).or_default();
                        e.0 += s.0;
                        e.1 += s.1;
                    }
                }
            }
            (None, Item::Named(..)) => {}
        }
    }
    for (module, (ns, count, found)) in modules.iter().zip(sums) {
        if found {
            let e = by_module.entry(module).or_default();
            e.0 += ns;
            e.1 += count;
        }
    }
    let counts = &mut m.stats.counts;
    counts.retain(|k, _| !(k.starts_with(UNNAMED_NS) || k.starts_with(UNNAMED_COUNT)));
    for (module, (ns, count)) in by_module {
        counts.insert(format!("{UNNAMED_NS}{module}"), ns);
        counts.insert(format!("{UNNAMED_COUNT}{module}"), count);
    }
}
