//! Mutated inputs through every tool that reads stacks: no panic, ever.
//!
//! The seeds are real inputs: the peer suites' `perf script` and folded
//! files (`../shared/testdata/peersuite/`) and the streams under
//! `tests/data/`. Each case changes one copy (bytes replaced, invalid
//! UTF-8 put in, cut, a piece repeated, lines swapped or joined) and
//! feeds it to `stackmerge --folded`, `flame`, `stacksym`, `wcreport` and
//! `wcexport --pprof`. A bad input may be refused (a one-line error); a
//! panic (exit 101, "panicked") or a hang fails the test with the input
//! kept for replay (under target/test-tmp/fuzz/). Fixed seed; `WALLCLOCK_FUZZ_CASES` sets the number of
//! cases (default 3000, five tool runs each), `WALLCLOCK_FUZZ_SEED` the seed.

mod util;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use util::{bin, root, scratch, testdata};

/// xorshift64*: small, seeded, the same sequence everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Seeds at most this long (the mutations matter, not the size).
const SEED_MAX: usize = 48 * 1024;

fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut paths: Vec<PathBuf> = Vec::new();
    if let Some(dir) = testdata("peersuite") {
        for sub in ["flamegraph-pl/test", "flamegraph-pl/test/results", "inferno/collapse-perf", "inferno/flamegraph/differential"] {
            let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join(sub)).unwrap().flatten().map(|e| e.path()).filter(|p| p.is_file()).collect();
            v.sort();
            paths.extend(v);
        }
    }
    for sub in ["stackmerge", "stacksym", "wcreport"] {
        let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("tests/data").join(sub)).unwrap().flatten().map(|e| e.path()).collect();
        v.sort();
        paths.extend(v);
    }
    paths
        .into_iter()
        .map(|p| {
            let mut b = std::fs::read(&p).unwrap();
            if b.len() > SEED_MAX {
                // Cut at a sample boundary (a blank line) where there is one.
                let cut = b[..SEED_MAX].windows(2).rposition(|w| w == b"\n\n").map_or(SEED_MAX, |i| i + 2);
                b.truncate(cut);
            }
            (p.file_name().unwrap().to_string_lossy().into_owned(), b)
        })
        .collect()
}

/// One to four mutations of a copy of `seed`.
fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(b.len());
        match rng.below(8) {
            0 => {
                if !b.is_empty() {
                    b[at] = rng.next() as u8;
                }
            }
            // Invalid UTF-8 and bytes perf script never writes.
            1 => b.insert(at, [0xff, 0xc3, 0x80, 0x00, b';', b'\t', b'\r'][rng.below(7)]),
            2 => b.truncate(at),
            3 => {
                let len = rng.below(200).min(b.len() - at.min(b.len()));
                let piece = b[at..at + len].to_vec();
                let to = rng.below(b.len());
                b.splice(to..to, piece);
            }
            4 => {
                // Drop a line break (two lines joined) or add one.
                if let Some(i) = b[at..].iter().position(|&c| c == b'\n') {
                    b.remove(at + i);
                } else {
                    b.insert(at, b'\n');
                }
            }
            5 => {
                let len = rng.below(64).min(b.len() - at.min(b.len()));
                b.drain(at..at + len);
            }
            // Digits and separators where names are, names where numbers are.
            6 => b.insert(at, [b'0', b'9', b' ', b'.', b':', b'[', b']', b'(', b')', b'{', b'"'][rng.below(11)]),
            _ => {
                let junk: &[u8] = [&b"h0123456789abcde"[..], b"\xef\xbf\xbd", b"_[k]", b"-1", b"1e308", b"18446744073709551616"][rng.below(6)];
                b.splice(at..at, junk.iter().copied());
            }
        }
    }
    b
}

const TOOLS: [(&str, &[&str]); 5] = [
    ("stackmerge", &["--folded"]),
    ("flame", &[]),
    ("stacksym", &[]),
    ("wcreport", &[]),
    ("wcexport", &["--pprof", "-o", "/dev/null"]),
];

/// Run one tool on `input` (a file); `Err` on a panic or a hang.
fn run_one(tool: &str, args: &[&str], input: &Path) -> Result<bool, String> {
    let mut child = Command::new(bin(tool))
        .args(args)
        .arg(input)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = std::io::Read::read_to_end(&mut err, &mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{tool}: no answer after 30 s"));
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let stderr = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
    if status.code() == Some(101) || stderr.contains("panicked") {
        return Err(format!("{tool}: {}", stderr.lines().find(|l| l.contains("panicked")).unwrap_or(stderr.trim())));
    }
    if status.code().is_none() {
        return Err(format!("{tool}: killed by a signal ({status})"));
    }
    // Refused: one error line (warnings before it are fine).
    if !status.success() && stderr.lines().filter(|l| l.starts_with(&format!("{tool}: "))).count() != 1 {
        return Err(format!("{tool}: not one error line: {stderr}"));
    }
    Ok(status.success())
}

#[test]
fn mutated_inputs_never_panic() {
    let seeds = seeds();
    if seeds.is_empty() {
        return;
    }
    let cases: usize = std::env::var("WALLCLOCK_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(3000);
    let seed: u64 = std::env::var("WALLCLOCK_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_f00d);
    let dir = scratch("fuzz");
    let start = Instant::now();
    // Two workers (the machine has two cores), each its own share of cases.
    let results: Vec<(usize, usize, Vec<String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2u64)
            .map(|w| {
                let (seeds, dir) = (&seeds, &dir);
                s.spawn(move || {
                    let mut rng = Rng(seed ^ (w + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                    let (mut runs, mut read, mut failures) = (0, 0, Vec::new());
                    for case in (w as usize..cases).step_by(2) {
                        let (name, base) = &seeds[rng.below(seeds.len())];
                        let input = mutate(base, &mut rng);
                        let path = dir.join(format!("case-{case}"));
                        std::fs::write(&path, &input).unwrap();
                        for (tool, args) in TOOLS {
                            runs += 1;
                            match run_one(tool, args, &path) {
                                Ok(ok) => read += ok as usize,
                                Err(e) => {
                                    let keep = dir.join(format!("failed-{case}-{tool}"));
                                    std::fs::copy(&path, &keep).unwrap();
                                    failures.push(format!("case {case} (from {name}, kept as {}): {e}", keep.display()));
                                }
                            }
                        }
                        let _ = std::fs::remove_file(&path);
                    }
                    (runs, read, failures)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let runs: usize = results.iter().map(|r| r.0).sum();
    let read: usize = results.iter().map(|r| r.1).sum();
    let failures: Vec<&String> = results.iter().flat_map(|r| &r.2).collect();
    eprintln!(
        "fuzz: {cases} cases from {} seeds (seed {seed:#x}), {runs} tool runs in {:.1} s ({read} read, {} refused with a one-line error): {} panics or hangs",
        seeds.len(),
        start.elapsed().as_secs_f64(),
        runs - read - failures.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.iter().take(20).map(|s| s.as_str()).collect::<Vec<_>>().join("\n"));
}

/// The inputs that made a tool panic, kept: inferno's collapser on a
/// header split by a tab (`assertion failed: self.event_filter.is_some()`)
/// and on an invalid byte before a Rust-hash-like tail (`start byte index
/// N is not a char boundary`), and stacks with a NUL byte, which flame's
/// sort took for `;` (found by the long run of the test above).
#[test]
fn former_panics_are_one_line_errors_or_graphs() {
    let dir = scratch("fuzz-known");
    let cases: [(&str, &[u8], Option<&str>); 3] = [
        ("tab-header", b"a\t1 1.5: cpu-clock:\n\tffff f (x)\n\n", Some("line 1: ")),
        ("char-boundary", b"dd 1 [000] 1.0: 1 cpu-clock:\n\t7f1a ok (/lib/libc.so.6)\n\ndd 1 [000] 1.1: 1 cpu-clock:\n\t7f1a ab\xffh0123456789abcde (/lib/libc.so.6)\n\n", Some("line 4: ")),
        ("nul-bytes", b"a;b\0c 1\na;b;c 2\na;b\0 3\na;b 4\nb\0;a 1\nb;a 5\n", None),
    ];
    for (name, input, err) in cases {
        let path = dir.join(name);
        std::fs::write(&path, input).unwrap();
        for (tool, args) in TOOLS {
            let out = Command::new(bin(tool)).args(args).arg(&path).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.code() != Some(101) && !stderr.contains("panicked"), "{tool} {name}: {stderr}");
            match err {
                Some(at) => assert!(!out.status.success() && stderr.trim().lines().count() == 1 && stderr.contains(at), "{tool} {name}: {stderr}"),
                None if tool == "flame" => assert!(out.status.success(), "{tool} {name}: {stderr}"),
                None => {}
            }
        }
    }
}
