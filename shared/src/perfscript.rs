//! `perf script` output collapsed to folded lines, as
//! `stackcollapse-perf.pl --all` would (kernel `_[k]` and JIT `_[j]`
//! frames annotated), by inferno's collapser, guarded.
//!
//! inferno's collapser panics on some malformed inputs (a symbol whose
//! lossily decoded bytes put a `char` boundary where it slices for a
//! Rust hash; a first sample whose header it cannot split). A panic is
//! never an answer to bad input here: the collapse runs under
//! `catch_unwind` with the panic message kept off stderr, and when it
//! panics, the samples are collapsed one at a time to find the first
//! that does, so the error names its line like any other bad line.

use std::panic::{self, AssertUnwindSafe};

use inferno::collapse::perf::{Folder, Options};
use inferno::collapse::Collapse;

/// A sample the collapser could not read: its first line (1-based) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadSample {
    pub line: usize,
    pub msg: String,
}

/// Collapse the whole `perf script` text `input` into folded lines
/// (`comm;frame;... PERIODS`, sorted).
pub fn collapse(input: &[u8]) -> Result<Vec<u8>, BadSample> {
    match guarded(input) {
        Ok(out) => Ok(out),
        Err(msg) => Err(find_bad_sample(input).unwrap_or(BadSample {
            line: 1,
            msg: format!("perf script input the collapser cannot read ({msg})"),
        })),
    }
}

/// One collapse, its panic (if any) turned into its message.
fn guarded(input: &[u8]) -> Result<Vec<u8>, String> {
    let mut opts = Options::default();
    opts.annotate_kernel = true;
    opts.annotate_jit = true;
    // One thread: a panic in a worker thread would not be ours to catch.
    opts.nthreads = 1;
    let mut folder = Folder::from(opts);
    let mut out = Vec::new();
    let prev = panic::take_hook();
    panic::set_hook(Box::new(|_| {}));
    let res = panic::catch_unwind(AssertUnwindSafe(|| folder.collapse(input, &mut out)));
    panic::set_hook(prev);
    match res {
        Ok(Ok(())) => Ok(out),
        Ok(Err(e)) => Err(e.to_string()),
        Err(p) => Err(p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".to_string())),
    }
}

/// The first sample (lines up to a blank line) that the collapser cannot
/// read on its own.
fn find_bad_sample(input: &[u8]) -> Option<BadSample> {
    let mut start = 0; // byte offset of the sample
    let mut first_line = 1;
    let mut line_no = 0;
    let mut at = 0;
    let check = |from: usize, to: usize, line: usize| -> Option<BadSample> {
        let sample = &input[from..to];
        if sample.iter().all(|b| b.is_ascii_whitespace()) {
            return None;
        }
        guarded(sample).err().map(|m| BadSample {
            line,
            msg: format!("a perf script sample that cannot be read (the collapser failed: {m})"),
        })
    };
    while at < input.len() {
        let end = input[at..].iter().position(|&b| b == b'\n').map_or(input.len(), |i| at + i + 1);
        line_no += 1;
        if input[at..end].iter().all(|b| b.is_ascii_whitespace()) {
            if let Some(bad) = check(start, end, first_line) {
                return Some(bad);
            }
            start = end;
            first_line = line_no + 1;
        }
        at = end;
    }
    check(start, input.len(), first_line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collapses_and_names_a_sample_that_panics_inferno() {
        let good = "dd 1 [000] 1.0: 250000 cpu-clock:\n\tffffffff8105f9f6 native_write_msr ([kernel.kallsyms])\n\t7f1a write (/lib/libc.so.6)\n\n";
        let out = collapse(good.as_bytes()).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "dd;write;native_write_msr_[k] 250000\n");
        // An invalid byte before a Rust-hash-like tail: inferno slices
        // the symbol inside the U+FFFD it decodes the byte to.
        let mut bad = good.as_bytes().to_vec();
        bad.extend_from_slice(b"dd 1 [000] 1.1: 250000 cpu-clock:\n\t7f1a ab\xffh0123456789abcde (/lib/libc.so.6)\n\n");
        let e = collapse(&bad).unwrap_err();
        assert_eq!(e.line, 5, "{e:?}");
        assert!(e.msg.contains("cannot be read"), "{e:?}");
    }
}
