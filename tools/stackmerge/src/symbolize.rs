//! Names for stacks that came without them (a raw `oncputime` stream given
//! as `--on on.txt`, any input that skipped `stacksym`), found in-process
//! through the stacksym library the way `stacksym` would: the streams' maps
//! records first, so a process that exited is still named, then the live
//! process. Stacks that already have frames cost nothing here.
//!
//! Also sets the trailer's `unnamed_ns:M` / `unnamed_count:M` counts from
//! the merged stacks (sampled stacks have their time only now).

use stacksym::{Engine, Options};
use wallclock_stream::accounting::kind_leaf;
use wallclock_stream::{Frame, Stack, StackTable, UNNAMED_ADDRS, UNNAMED_COUNT, UNNAMED_NS};

use crate::order::{Item, Merged, Unnamed};

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
                if let Some(o) = s.object.take().filter(|_| s.kind == wallclock_stream::Kind::Off) {
                    frames.push(Frame::named(wallclock_stream::accounting::object_frame(&o)));
                }
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

/// Count `stacks` (table stack, ns, count) into `into`. Each table frame's
/// module when it is unnamed is found once per frame rather than once per
/// stack it is in.
pub(crate) fn count_stacks(table: &StackTable, stacks: impl Iterator<Item = (u32, u64, u64)>, into: &mut Unnamed) {
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
    if modules.is_empty() {
        return;
    }
    // Per module: (ns, count, in any stack).
    let mut sums = vec![(0u64, 0u64, false); modules.len()];
    let mut seen: Vec<u32> = Vec::new();
    for (id, ns, count) in stacks {
        seen.clear();
        for &f in table.stack(id) {
            let i = unnamed[f as usize];
            if i != u32::MAX && !seen.contains(&i) {
                seen.push(i);
                let e = &mut sums[i as usize];
                *e = (e.0 + ns, e.1 + count, true);
            }
        }
    }
    for (module, (ns, count, found)) in modules.iter().zip(sums) {
        if found {
            let e = into.entry(module.to_string()).or_default();
            e.0 += ns;
            e.1 += count;
        }
    }
}

/// Time and events of the stacks with unnamed frames, per module, replacing
/// what the inputs said: the named entries' counted before they were
/// sorted (`m.unnamed`, from their frames read in the order they were
/// interned rather than scattered), the records' now.
fn count_unnamed(m: &mut Merged) {
    let mut by_module = std::mem::take(&mut m.unnamed);
    let full = || {
        m.items.iter().filter_map(|i| match i {
            Item::Full(s) => Some(s),
            Item::Named(..) => None,
        })
    };
    count_stacks(&m.table, full().filter_map(|s| Some((s.stack_id?, s.ns, s.count))), &mut by_module);
    let mut seen: Vec<&str> = Vec::new();
    for s in full().filter(|s| s.stack_id.is_none()) {
        seen.clear();
        for module in s.frames.iter().filter_map(Frame::unnamed_module) {
            if !seen.contains(&module) {
                seen.push(module);
                let e = by_module.entry(module.to_string()).or_default();
                e.0 += s.ns;
                e.1 += s.count;
            }
        }
    }
    let counts = &mut m.stats.counts;
    counts.retain(|k, _| !(k.starts_with(UNNAMED_NS) || k.starts_with(UNNAMED_COUNT)));
    for (module, (ns, count)) in by_module {
        counts.insert(format!("{UNNAMED_NS}{module}"), ns);
        counts.insert(format!("{UNNAMED_COUNT}{module}"), count);
    }
}
