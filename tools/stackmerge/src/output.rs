//! Writing the merged view: the stream, or folded lines.

use std::borrow::Cow;
use std::io::Write;

use anyhow::Result;
use wallclock_stream::accounting::kind_leaf;
use wallclock_stream::fasthash::FastMap;
use wallclock_stream::pgen::{pgen_of, pgen_suffix};
use wallclock_stream::{folded, Frame, Kind, Stack, Waker};

use crate::order::Merged;
use crate::Options;

/// Frames for display: symbolized frames, else the raw addresses in hex
/// (user root first, then kernel), then the state leaf.
pub fn display_frames(s: &Stack) -> Cow<'_, [Frame]> {
    let frames = folded::frames_or_addresses(s);
    match (&frames, kind_leaf(s)) {
        (Cow::Owned(_), Some(leaf)) => {
            let mut v = frames.into_owned();
            v.push(Frame::named(leaf));
            if let (Kind::Off, Some(o)) = (s.kind, &s.object) {
                v.push(Frame::named(wallclock_stream::accounting::object_frame(o)));
            }
            Cow::Owned(v)
        }
        _ => frames,
    }
}

/// The root frame of a folded line: the process, `NAME (PID)` (its main
/// thread's name, which is the name after exec), or `NAME` when grouped by
/// command (`by_command`, see `--roots`), or with --per-thread the thread,
/// `comm-TID`. A later process of a pid used again in the capture
/// (`pgen`) says which: `NAME (PID) (2nd)`, `comm-TID (2nd)`.
fn root_of(s: &Stack, m: &Merged, opts: &Options, by_command: bool) -> Option<String> {
    if opts.gpu_roots && s.kind == Kind::Gpu {
        let g = s.gpu.as_ref();
        let dev = g.and_then(|g| g.device).map_or("?".to_string(), |d| d.to_string());
        let stream = g.and_then(|g| g.stream).map_or("?".to_string(), |d| d.to_string());
        return Some(format!("[gpu {dev} stream {stream}]"));
    }
    if opts.per_thread {
        let comm = m.threads.get(&(s.pid, pgen_of(s.pgen), s.tid)).map(|t| t.comm.as_str()).filter(|c| !c.is_empty()).unwrap_or(&s.comm);
        if comm.is_empty() && s.tid == 0 {
            return None;
        }
        return Some(format!("{comm}-{}{}", s.tid, pgen_suffix(s.pgen)));
    }
    let comm = m.threads.get(&(s.pid, pgen_of(s.pgen), s.pid)).map(|t| t.comm.as_str()).filter(|c| !c.is_empty()).unwrap_or(&s.comm);
    if s.pid == 0 {
        // Folded input: no process known.
        return (!comm.is_empty()).then(|| comm.to_string());
    }
    let root = folded::Roots::root(by_command, comm, s.pid);
    Some(if by_command { root } else { root + &pgen_suffix(s.pgen) })
}

/// Frames of a waker's stack or block: named, else the addresses.
fn waker_frames(frames: &[Frame], ustack: &[u64], kstack: &[u64]) -> Vec<Frame> {
    if !frames.is_empty() {
        return frames.to_vec();
    }
    let mut v: Vec<Frame> = ustack.iter().map(|a| Frame::named(format!("0x{a:x}"))).collect();
    v.extend(kstack.iter().map(|a| Frame::kernel(format!("0x{a:x}"))));
    v
}

fn push_w(text: &mut String, f: &Frame) {
    text.push(';');
    text.push_str(&folded::frame_text(f));
    text.push_str("_[w]");
}

/// `;--;` then the waker's frames leaf to root and its name, each `_[w]`
/// (bcc offwaketime's layout); then down a chain `;--;` and the waker's
/// own block, root to leaf with its state leaf, and that block's waker.
fn push_waker(text: &mut String, w: &Waker) {
    text.push_str(";--");
    for f in waker_frames(&w.frames, &w.ustack, &w.kstack).iter().rev() {
        push_w(text, f);
    }
    push_w(text, &Frame::named(w.who()));
    if let Some(b) = &w.blocked {
        text.push_str(";--");
        for f in &waker_frames(&b.frames, &b.ustack, &b.kstack) {
            push_w(text, f);
        }
        push_w(text, &Frame::named(b.state.leaf_name()));
        if let Some(next) = &b.waker {
            push_waker(text, next);
        }
    }
}

/// Folded lines: values summed per line in ns, then converted once.
pub fn write_folded(m: &Merged, opts: &Options, out: &mut dyn Write) -> Result<()> {
    let mut lines: Vec<(Vec<u8>, u64)> = Vec::with_capacity(m.len());
    // The text of each table stack, made once (threads share stacks).
    let mut texts: FastMap<u32, String> = FastMap::default();
    let pids: std::collections::BTreeSet<(u32, u32)> = (0..m.len()).map(|i| m.stack(i)).filter(|s| s.pid != 0).map(|s| (s.pid, pgen_of(s.pgen))).collect();
    let by_command = opts.roots.by_command(pids.len());
    for i in 0..m.len() {
        let s = &*m.stack(i);
        let root = root_of(s, m, opts, by_command);
        let mut text = match s.stack_id {
            Some(id) => {
                let body = texts.entry(id).or_insert_with(|| folded::stack_text_of::<&str>(&[], m.table.frames_of(id)));
                match &root {
                    Some(r) => {
                        let r = folded::escape(r);
                        let mut t = String::with_capacity(r.len() + 1 + body.len() + 4);
                        t.push_str(&r);
                        t.push(';');
                        t.push_str(body);
                        t
                    }
                    None => body.clone(),
                }
            }
            None => folded::stack_text(root.as_slice(), &display_frames(s)),
        };
        text.push_str(s.kind.marker());
        if let (true, Some(w)) = (opts.wakers, &s.waker) {
            push_waker(&mut text, w);
        }
        let text = text.into_bytes();
        lines.push((text, s.ns));
    }
    // Different stacks can print the same line (threads under one process
    // root): sort, then sum neighbours in ns before the one conversion.
    lines.sort_unstable();
    lines.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            kept.1 += later.1;
        }
        same
    });
    // An event profile's values are counts of its event: no time unit.
    let counted = m.header.event.is_some();
    for (text, ns) in lines {
        out.write_all(&text)?;
        writeln!(out, " {}", if counted { ns } else { opts.unit.from_ns(ns) })?;
    }
    Ok(())
}

