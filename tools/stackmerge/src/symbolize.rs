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

use crate::Merged;

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

/// Name the frames of every stack that has addresses and no frames.
pub fn name_frames(m: &mut Merged) {
    if m.stacks.iter().any(waker_needs) {
        let mut engine = Engine::new(Options { tool: "stackmerge", ..Options::default() });
        for mp in &m.maps {
            engine.add_maps(mp);
        }
        let mut woken: Vec<&mut Stack> = m.stacks.iter_mut().filter(|s| waker_needs(s)).collect();
        stacksym::name_wakers(&mut engine, &mut woken);
    }
    if m.stacks.iter().any(needs) {
        let mut engine = Engine::new(Options { tool: "stackmerge", ..Options::default() });
        for mp in &m.maps {
            engine.add_maps(mp);
        }
        engine.prepare(m.stacks.iter().filter(|s| needs(s)));
        for s in m.stacks.iter_mut().filter(|s| needs(s)) {
            let mut frames = engine.frames(s);
            if let Some(leaf) = kind_leaf(s) {
                frames.push(Frame::named(leaf));
            }
            if !frames.is_empty() {
                s.stack_id = Some(m.table.stack_of(&frames));
            }
        }
        for (k, v) in engine.take_counts().into_iter().filter(|(k, _)| k.starts_with(UNNAMED_ADDRS)) {
            *m.stats.counts.entry(k).or_insert(0) += v;
        }
    }
    count_unnamed(m);
}

/// Time and events of the stacks with unnamed frames, per module (a stack
/// once per module), replacing what the inputs said.
fn count_unnamed(m: &mut Merged) {
    let mut by_module: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let mut seen: Vec<&str> = Vec::new();
    let table = &m.table;
    // Each table frame's module when it is unnamed, found once per frame
    // rather than once per stack it is in.
    let unnamed: Vec<Option<&str>> = (0..table.frame_count() as u32).map(|f| table.frame(f).unnamed_module()).collect();
    let any_unnamed = unnamed.iter().any(Option::is_some);
    for s in &m.stacks {
        seen.clear();
        let modules: Box<dyn Iterator<Item = &str>> = match s.stack_id {
            Some(_) if !any_unnamed => continue,
            Some(id) => Box::new(table.stack(id).iter().filter_map(|&f| unnamed[f as usize])),
            None => Box::new(s.frames.iter().filter_map(Frame::unnamed_module)),
        };
        for module in modules {
            if !seen.contains(&module) {
                seen.push(module);
                let e = by_module.entry(module).or_default();
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
