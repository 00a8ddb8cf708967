//! HotSpot's code cache, read from the live JVM: which code blob holds a
//! pc (each code heap's segment map leads from a segment back to the
//! start of its block), the blob's frame size and kind, and the bounds
//! of the template interpreter.

use std::collections::BTreeMap;

use super::mem::Mem;
use super::vmstructs::{CodeBegin, Layout};

/// A blob found before: the bytes of its block's header and its own
/// header as read then (used flag, name, size, frame, code, method), and
/// what they said.
struct Known {
    end: u64,
    block: u64,
    bytes: Vec<u8>,
    blob: Blob,
}

/// Blobs kept, at most (a code cache holds tens of thousands; past this
/// the map starts again).
const KNOWN_MAX: usize = 1 << 16;
/// The header read covers the method pointer of a compiled method when
/// it lies this close to the block (HotSpot's do: 0x60-0x80 bytes in).
const HEADER_MAX: usize = 256;

struct Heap {
    low: u64,
    /// The top of its reserved space: the part committed grows.
    high: u64,
    segmap: u64,
    log2: u32,
}

/// What a frame walk needs of a blob.
#[derive(Debug, Clone, Copy)]
pub struct Blob {
    /// Words of its frame (0: a stub without a frame of its own).
    pub frame_size: u64,
    pub code_begin: u64,
    /// Where its frame is complete (past the prologue), from code_begin.
    pub frame_complete: i32,
    /// The Method* of a compiled method, 0 otherwise.
    pub method: u64,
}

/// Where a pc lies.
pub enum Found {
    /// Outside every code heap: not the JVM's code.
    Outside,
    Interpreter,
    Blob(Blob),
    /// In a heap, in a block that is free: the blob that ran was freed.
    Freed,
}

pub struct CodeCache {
    heaps: Vec<Heap>,
    interp: (u64, u64),
    /// Blob name pointers known to be compiled methods' (`nmethod`).
    nmethod_names: Vec<u64>,
    other_names: Vec<u64>,
    /// Blobs by their start. A frame in one costs one read (its headers,
    /// compared with what they were), not three (the segment map, the
    /// headers, the method pointer): a blob freed, or its block reused
    /// for another, changes those bytes (HotSpot frees blocks at
    /// safepoints; the used flag, the blob's size, name and method say).
    known: BTreeMap<u64, Known>,
}

impl CodeCache {
    pub fn read(mem: &Mem, l: &Layout) -> Result<CodeCache, String> {
        let arr = mem.u64(l.heaps)?;
        if arr == 0 {
            return Err("its code cache is not set up yet".into());
        }
        let n = mem.u32(arr + l.array_len)? as u64;
        let data = mem.u64(arr + l.array_data)?;
        let mut heaps = Vec::new();
        for i in 0..n.min(16) {
            let h = mem.u64(data + i * 8)?;
            let low = mem.u64(h + l.heap_memory + l.vs_low)?;
            let high = mem.u64(h + l.heap_memory + l.vs_high)?;
            let segmap = mem.u64(h + l.heap_segmap + l.vs_low)?;
            let log2 = mem.u32(h + l.heap_log2_segment)?;
            if low < high && log2 < 32 {
                heaps.push(Heap { low, high, segmap, log2 });
            }
        }
        if heaps.is_empty() {
            return Err("its code cache has no heaps yet".into());
        }
        let interp = interp_range(mem, l)?;
        Ok(CodeCache { heaps, interp, nmethod_names: Vec::new(), other_names: Vec::new(), known: BTreeMap::new() })
    }

    /// Whether the interpreter's code is known (generated when read).
    pub fn interp_known(&self) -> bool {
        self.interp != (0, 0)
    }

    pub fn contains(&self, pc: u64) -> bool {
        self.heaps.iter().any(|h| pc >= h.low && pc < h.high)
    }

    pub fn find(&mut self, mem: &Mem, l: &Layout, pc: u64) -> Result<Found, String> {
        // Read early in the JVM's start (the capture reaches a launched
        // JVM within milliseconds), its code cache can be set up before
        // its interpreter is generated: until it is, every interpreted
        // frame would be an unnamed blob (`Interpreter` from the perf map,
        // kept while its block's fingerprint repeats).
        if self.interp == (0, 0) {
            self.interp = interp_range(mem, l)?;
        }
        if pc >= self.interp.0 && pc < self.interp.1 {
            return Ok(Found::Interpreter);
        }
        let Some(i) = self.heaps.iter().position(|h| pc >= h.low && pc < h.high) else { return Ok(Found::Outside) };
        if let Some(b) = self.known_blob(mem, pc) {
            return Ok(Found::Blob(b));
        }
        let h = &self.heaps[i];
        let seg = block_start(mem, h, (pc - h.low) >> h.log2)?;
        let Some(seg) = seg else { return Ok(Found::Freed) };
        let block = h.low + (seg << h.log2);
        // The block's header and its blob's in one read (a read of
        // another process costs a system call, microseconds here).
        let blob = block + l.block_size;
        let code_field = match l.blob_code {
            CodeBegin::Pointer(o) => o + 8,
            CodeBegin::Offset(o) => o + 4,
            CodeBegin::None => 0,
        };
        let span = [l.blob_name + 8, l.blob_size + 4, l.blob_frame_size + 4, l.blob_frame_complete + 4, code_field].into_iter().max().unwrap_or(0) as usize;
        let (used_at, head) = (l.block_used as usize, l.block_size as usize);
        if used_at >= head || head > 64 {
            return Err("a code heap block header of an unknown shape".into());
        }
        // With the method pointer when it is near (one read for both).
        let with_method = head + l.compiled_method as usize + 8;
        let len = if with_method <= HEADER_MAX { (head + span.min(128)).max(with_method) } else { head + span.min(128) };
        let mut whole = vec![0u8; len];
        mem.read(block, &mut whole)?;
        if whole[used_at] == 0 {
            return Ok(Found::Freed);
        }
        let hdr = &whole[head..];
        let bytes = whole.clone();
        let at = |o: u64, n: usize| -> u64 {
            let o = o as usize;
            hdr.get(o..o + n).map_or(0, |b| b.iter().rev().fold(0u64, |v, &x| (v << 8) | u64::from(x)))
        };
        let code_begin = match l.blob_code {
            CodeBegin::Pointer(o) => at(o, 8),
            CodeBegin::Offset(o) => blob + u64::from(at(o, 4) as u32),
            CodeBegin::None => blob,
        };
        let size = u64::from(at(l.blob_size, 4) as u32);
        // A block reused for another blob since: its bounds no longer
        // hold the pc.
        if pc < blob || pc >= blob + size {
            return Ok(Found::Freed);
        }
        let name = at(l.blob_name, 8);
        let is_nmethod = if self.nmethod_names.contains(&name) {
            true
        } else if self.other_names.contains(&name) {
            false
        } else {
            let n = mem.cstr(name).unwrap_or_default();
            let yes = n.ends_with("nmethod");
            if yes { &mut self.nmethod_names } else { &mut self.other_names }.push(name);
            yes
        };
        let method = match (is_nmethod, with_method <= len) {
            (false, _) => 0,
            (true, true) => at(l.compiled_method, 8),
            (true, false) => mem.u64(blob + l.compiled_method)?,
        };
        let found = Blob {
            frame_size: (at(l.blob_frame_size, 4) as u32 as i32).max(0) as u64,
            code_begin,
            frame_complete: match l.blob_frame_complete_len {
                2 => i32::from(at(l.blob_frame_complete, 2) as u16 as i16),
                _ => at(l.blob_frame_complete, 4) as u32 as i32,
            },
            method,
        };
        // Kept only where the headers read hold everything it says.
        if !is_nmethod || with_method <= len {
            if self.known.len() >= KNOWN_MAX {
                self.known.clear();
            }
            self.known.insert(blob, Known { end: blob + size, block, bytes, blob: found });
        }
        Ok(Found::Blob(found))
    }

    /// The blob holding `pc` as found before, if its headers still read
    /// the same (one read); else it is forgotten.
    fn known_blob(&mut self, mem: &Mem, pc: u64) -> Option<Blob> {
        let (&start, k) = self.known.range(..=pc).next_back()?;
        if pc >= k.end {
            return None;
        }
        let mut now = vec![0u8; k.bytes.len()];
        if mem.read(k.block, &mut now).is_ok() && now == k.bytes {
            return Some(k.blob);
        }
        self.known.remove(&start);
        None
    }
}

/// The interpreter's code (its StubQueue's buffer), (0, 0) while it is
/// not generated yet.
fn interp_range(mem: &Mem, l: &Layout) -> Result<(u64, u64), String> {
    let q = mem.u64(l.interp_code)?;
    if q == 0 {
        return Ok((0, 0));
    }
    let b = mem.u64(q + l.queue_buffer)?;
    let limit = mem.u32(q + l.queue_limit)?;
    Ok(if b == 0 || limit == 0 { (0, 0) } else { (b, b + u64::from(limit)) })
}

/// Bytes of the segment map read at once: the hops from a pc back to its
/// block's start (at most 254 segments each) in one read for a blob of up
/// to 4096 segments (256 KiB at 64-byte segments), where a read per hop
/// cost a system call each.
const SEGMAP_WINDOW: u64 = 4096;

/// The first segment of the block holding segment `seg` of heap `h`
/// (None: a free block).
fn block_start(mem: &Mem, h: &Heap, mut seg: u64) -> Result<Option<u64>, String> {
    let mut buf = [0u8; SEGMAP_WINDOW as usize];
    let mut hops = 0;
    loop {
        let lo = seg.saturating_sub(SEGMAP_WINDOW - 1);
        let win = &mut buf[..(seg - lo + 1) as usize];
        mem.read(h.segmap + lo, win)?;
        while seg >= lo {
            let b = win[(seg - lo) as usize];
            if b == 0xff {
                return Ok(None);
            }
            if b == 0 {
                return Ok(Some(seg));
            }
            seg = seg.checked_sub(u64::from(b)).ok_or("a segment map that leads before its heap")?;
            hops += 1;
            if hops > 4096 {
                return Err("a segment map without a block start".into());
            }
        }
    }
}
