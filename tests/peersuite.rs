//! The test suites of inferno 0.12.8 and FlameGraph, run on our tools.
//!
//! Inputs and expected results live in `../shared/testdata/peersuite/`
//! (not ours to commit; its README says which result goes with which
//! input and what a comparison normalises, N1-N5 and F1-F3 below). Each
//! test runs every case and fails once at the end, listing per file what
//! differed, so one run shows the whole picture.

mod util;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use util::{run, testdata};

type Folded = BTreeMap<String, u64>;

fn peer(rel: &str) -> Option<PathBuf> {
    testdata(&format!("peersuite/{rel}"))
}

/// Folded lines as the peers write them: `stack VALUE` summed by stack.
fn read_folded(text: &str) -> Folded {
    let mut out = Folded::new();
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        let (stack, v) = l.rsplit_once(' ').unwrap_or_else(|| panic!("bad folded line {l:?}"));
        *out.entry(stack.to_string()).or_default() += v.trim().parse::<u64>().unwrap_or_else(|_| panic!("{l:?}"));
    }
    out
}

/// Our folded output, normalised: N1 leaf kind marker off, N2 `_[k]` /
/// `_[j]` off unless the peer result has them, N3 our escaping undone.
fn normalise_ours(text: &str, kernel: bool, jit: bool) -> Folded {
    let mut out = Folded::new();
    for (stack, v) in read_folded(text) {
        let frames: Vec<String> = stack
            .split(';')
            .enumerate()
            .map(|(i, f)| {
                let mut f = f;
                if i == stack.split(';').count() - 1 {
                    for m in ["_[c]", "_[o]", "_[g]"] {
                        f = f.strip_suffix(m).unwrap_or(f);
                    }
                }
                if !kernel {
                    f = f.strip_suffix("_[k]").unwrap_or(f);
                }
                if !jit {
                    f = f.strip_suffix("_[j]").unwrap_or(f);
                }
                wallclock_stream::folded::unescape(f).into_owned()
            })
            .collect();
        *out.entry(frames.join(";")).or_default() += v;
    }
    out
}

/// N4: quotes removed (flamegraph.pl's results vs inferno's names).
fn unquoted(f: &Folded) -> Folded {
    let mut out = Folded::new();
    for (k, v) in f {
        *out.entry(k.replace(['"', '\''], "")).or_default() += v;
    }
    out
}

/// What differs between `ours` and `want`, one line each; a single
/// extra stack or count that the fork keeping the last event has
/// (`last`) is the last sample, which brendangregg's results drop.
fn differences(ours: &Folded, want: &Folded, last: Option<&Folded>) -> Vec<String> {
    let mut diffs: Vec<(&str, String)> = Vec::new();
    for (k, v) in want {
        match ours.get(k) {
            None => diffs.push((k, format!("missing {k} {v}"))),
            Some(o) if o != v => diffs.push((k, format!("count of {k}: {o}, want {v}"))),
            _ => {}
        }
    }
    for (k, v) in ours {
        if !want.contains_key(k) {
            diffs.push((k, format!("extra {k} {v}")));
        }
    }
    if let (Some(last), [(stack, _)]) = (last, &diffs[..]) {
        let more = ours.get(*stack).copied().unwrap_or(0) > want.get(*stack).copied().unwrap_or(0);
        if more && last.get(*stack).copied().unwrap_or(0) > want.get(*stack).copied().unwrap_or(0) {
            return Vec::new();
        }
    }
    diffs.into_iter().map(|(_, d)| d).collect()
}

struct CollapseCase {
    input: &'static str,
    result: &'static str,
    kernel: bool,
    jit: bool,
    /// A flamegraph.pl result (N4; the fork may vouch for the last event).
    pl: bool,
}

fn collapse_cases() -> Vec<CollapseCase> {
    let pl = [
        "perf-cycles-instructions-01", "perf-dd-stacks-01", "perf-funcab-cmd-01", "perf-funcab-pid-01",
        "perf-iperf-stacks-pidtid-01", "perf-java-faults-01", "perf-java-stacks-01", "perf-java-stacks-02",
        "perf-js-stacks-01", "perf-mirageos-stacks-01", "perf-numa-stacks-01", "perf-vertx-stacks-01",
    ];
    let mut v: Vec<CollapseCase> = pl
        .iter()
        .map(|n| CollapseCase {
            input: leak(format!("flamegraph-pl/test/{n}.txt")),
            result: leak(format!("flamegraph-pl/test/results/{n}-collapsed-all.txt")),
            kernel: true,
            jit: true,
            pl: true,
        })
        .collect();
    let own = |input: String, result: String, kernel, jit| CollapseCase { input: leak(input), result: leak(result), kernel, jit, pl: false };
    // inferno fixes flamegraph.pl's Rust demangling and keeps its own result.
    v.push(own(
        "flamegraph-pl/test/perf-rust-Yamakaky-dcpu.txt".into(),
        "inferno/collapse-perf/results/perf-rust-Yamakaky-dcpu-collapsed-all.txt".into(),
        true,
        true,
    ));
    for n in ["no-events", "single-line-stacks", "single-event", "go-stacks", "java-inline", "cpp-stacks-std-function"] {
        v.push(own(format!("inferno/collapse-perf/{n}.txt"), format!("inferno/collapse-perf/results/{n}-collapsed.txt"), false, false));
    }
    v.push(own(
        "inferno/collapse-perf/versioned-vmlinux.txt".into(),
        "inferno/collapse-perf/results/versioned-vmlinux-collapsed-kernel.txt".into(),
        true,
        false,
    ));
    v.push(own(
        "inferno/collapse-perf/sourcepawn-jitdump.txt".into(),
        "inferno/collapse-perf/results/sourcepawn-jitdump-collapsed-jit.txt".into(),
        false,
        true,
    ));
    v.push(own(
        "flamegraph-pl/example-perf-stacks.txt".into(),
        "inferno/collapse-perf/results/example-perf-stacks-collapsed.txt".into(),
        false,
        false,
    ));
    v
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn text(p: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned()
}

/// Every perf script input collapses to the paired result's stacks and
/// counts, by stackmerge reading it and by stacksym passing it on.
#[test]
fn collapse_matches_peer_results() {
    let Some(_) = peer("README.md") else { return };
    let mut failures = Vec::new();
    let cases = collapse_cases();
    for c in &cases {
        let input = peer(c.input).unwrap();
        let path = input.to_str().unwrap();
        let mut want = read_folded(&text(&peer(c.result).unwrap()));
        let last = c.pl.then(|| {
            let p = c.result.replace("flamegraph-pl/", "flamegraph-pl-fork-lastsample/");
            unquoted(&read_folded(&text(&peer(&p).unwrap())))
        });
        if c.pl {
            want = unquoted(&want);
        }
        let merged = run("stackmerge", &["--folded", "--unit", "ns", "--on", path], b"");
        let sym = run("stacksym", &[path], b"");
        let sym_merged = run("stackmerge", &["--folded", "--unit", "ns", "-"], &sym.stdout);
        for (tool, out) in [("stackmerge", &merged), ("stacksym | stackmerge", &sym_merged)] {
            if !out.status.success() {
                failures.push(format!("{}: {tool}: {}", c.input, String::from_utf8_lossy(&out.stderr).trim()));
                continue;
            }
            let mut ours = normalise_ours(&String::from_utf8_lossy(&out.stdout), c.kernel, c.jit);
            if c.pl {
                ours = unquoted(&ours);
            }
            let d = differences(&ours, &want, last.as_ref());
            if !d.is_empty() {
                failures.push(format!("{}: {tool}: {} differences, first: {}", c.input, d.len(), d[..d.len().min(3)].join(" | ")));
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} collapse cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
    eprintln!("{} collapse cases, each by 2 tools: all match", cases.len());
}

#[path = "peersuite/svg.rs"]
mod svg;

/// Every flame graph case of inferno's tests that this toolkit has the
/// options for draws inferno's frames (F1-F3).
#[test]
fn flame_draws_inferno_frames() {
    let Some(_) = peer("README.md") else { return };
    let mut failures = Vec::new();
    let cases = svg::flame_cases();
    for c in &cases {
        if let Err(e) = svg::check(c) {
            failures.push(format!("{}: {e}", c.name));
        }
    }
    assert!(failures.is_empty(), "{} of {} flame cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
    let control = svg::check(&svg::wrong_pairing());
    assert!(control.is_err(), "the comparison cannot tell two graphs apart");
    eprintln!("control (java drawn against vertx's SVG): {}", control.unwrap_err());
    eprintln!("{} flame cases: all draw inferno's frames", cases.len());
}

/// Inputs inferno keeps for its warning tests: read without a panic;
/// an empty one is refused with a message, as inferno and flamegraph.pl do.
#[test]
fn robustness_inputs() {
    let Some(_) = peer("README.md") else { return };
    for rel in [
        "inferno/flamegraph/bad-lines/bad-lines.txt",
        "inferno/flamegraph/fractional-samples/fractional.txt",
        "inferno/flamegraph/fractional-samples/with-space.txt",
        "inferno/flamegraph/fractional-samples/tricky-stack.txt",
        "inferno/flamegraph/fractional-samples/zero-fractionals.txt",
        "inferno/flamegraph/fractional-samples/no-fractionals.txt",
        "inferno/collapse-perf/empty-line.txt",
        "inferno/collapse-perf/weird-stack-line.txt",
    ] {
        let p = peer(rel).unwrap();
        for (tool, args) in [("flame", vec![]), ("stackmerge", vec!["--folded"]), ("wcreport", vec![])] {
            let mut a: Vec<&str> = args.clone();
            a.push(p.to_str().unwrap());
            let out = run(tool, &a, b"");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.code() != Some(101) && !err.contains("panicked"), "{tool} {rel}: {err}");
            if !out.status.success() {
                assert_eq!(err.trim().lines().count(), 1, "{tool} {rel}: one line: {err}");
                assert!(err.contains("line "), "{tool} {rel}: names the line: {err}");
            }
        }
    }
    // Fractional counts are kept (flamegraph.pl's widths), not rounded.
    let frac = peer("inferno/flamegraph/fractional-samples/fractional.txt").unwrap();
    let svg = util::ok("flame", &[frac.to_str().unwrap()], b"");
    assert!(svg.contains("<title>[unknown] (2.567 samples"), "fractional count kept");
    let empty = peer("inferno/flamegraph/empty/empty.txt").unwrap();
    let out = run("flame", &[empty.to_str().unwrap()], b"");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no stacks"), "empty input refused: {err}");
}
