//! The flame cases of inferno's `tests/flamegraph.rs`, for the options
//! this toolkit has, and the frames of an SVG (F1: depth, name, fg:x,
//! fg:w) to compare ours with inferno's.

use std::path::PathBuf;

use super::peer;
use crate::util::run;

/// One case: inputs (given as they are, or emulating an option we lack),
/// our flags, inferno's SVG.
pub struct FlameCase {
    pub name: String,
    inputs: Vec<Input>,
    flags: Vec<&'static str>,
    svg: &'static str,
    diff: bool,
}

enum Input {
    File(&'static str),
    /// F3: inferno's `--reverse`, each line's frames reversed first.
    Reversed(&'static str),
    /// A two-count file split into its BEFORE (0) or AFTER (1) column.
    Column(&'static str, usize),
}

const DIFF: &str = "inferno/flamegraph/differential/perf-cycles-instructions-01-collapsed-all-diff.txt";
const VERTX: &str = "flamegraph-pl-fork-lastsample/test/results/perf-vertx-stacks-01-collapsed-all.txt";
const VERTX_SVG: &str = "inferno/flamegraph/perf-vertx-stacks/perf-vertx-stacks-01-collapsed-all.svg";

pub fn flame_cases() -> Vec<FlameCase> {
    let case = |name: &str, inputs: Vec<Input>, flags: Vec<&'static str>, svg: &'static str| FlameCase {
        name: name.to_string(),
        inputs,
        flags,
        svg,
        diff: false,
    };
    let java = "flamegraph-pl-fork-lastsample/test/results/perf-java-stacks-01-collapsed-all.txt";
    let js = "flamegraph-pl-fork-lastsample/test/results/perf-js-stacks-01-collapsed-all.txt";
    let async_java = "inferno/flamegraph/colors/async-profiler-collapsed-part.txt";
    let unsorted = "inferno/flamegraph/unsorted-input/perf-vertx-stacks-01-collapsed-all-unsorted.txt";
    let mut v = vec![
        case("colors java", vec![Input::File(java)], vec!["--colors", "java"], "inferno/flamegraph/colors/java.svg"),
        case("truncate right", vec![Input::File(java)], vec!["--colors", "java"], "inferno/flamegraph/options/truncate-right.svg"),
        case("colors js", vec![Input::File(js)], vec!["--colors", "js"], "inferno/flamegraph/colors/js.svg"),
        case("async-profiler java", vec![Input::File(async_java)], vec!["--colors", "java"], "inferno/flamegraph/colors/async-profiler-java.svg"),
        case("deterministic", vec![Input::File(async_java)], vec![], "inferno/flamegraph/colors/deterministic.svg"),
        case("differential", vec![Input::File(DIFF)], vec![], "inferno/flamegraph/differential/diff.svg"),
        case("default options", vec![Input::File(DIFF)], vec![], "inferno/flamegraph/options/default.svg"),
        case("title", vec![Input::File(DIFF)], vec!["--title", "Test Graph"], "inferno/flamegraph/options/title_simple.svg"),
        case("title symbols", vec![Input::File(DIFF)], vec!["--title", "Test <& ' \""], "inferno/flamegraph/options/title_with_symbols.svg"),
        case("subtitle", vec![Input::File(DIFF)], vec!["--subtitle", "Test Subtitle"], "inferno/flamegraph/options/subtitle_simple.svg"),
        case(
            "subtitle symbols",
            vec![Input::File(DIFF)],
            vec!["--subtitle", "Test Subtitle <& ' \""],
            "inferno/flamegraph/options/subtitle_with_symbols.svg",
        ),
        case("color diffusion", vec![Input::File(VERTX)], vec![], "inferno/flamegraph/options/colordiffusion.svg"),
        case("palette map", vec![Input::File(VERTX)], vec![], "inferno/flamegraph/palette-map/consistent-palette.svg"),
        case(
            "multiple inputs",
            vec![
                Input::File("inferno/flamegraph/multiple-inputs/perf-vertx-stacks-01-collapsed-all-unsorted-1.txt"),
                Input::File("inferno/flamegraph/multiple-inputs/perf-vertx-stacks-01-collapsed-all-unsorted-2.txt"),
            ],
            vec![],
            VERTX_SVG,
        ),
        case("narrow blocks", vec![Input::File("inferno/flamegraph/narrow-blocks/narrow-blocks.txt")], vec![], "inferno/flamegraph/narrow-blocks/narrow-blocks.svg"),
        case("inverted", vec![Input::File(VERTX)], vec!["--inverted", "--title", "Icicle Graph"], "inferno/flamegraph/inverted/inverted.svg"),
        case("grey frames", vec![Input::File("inferno/flamegraph/grey-frames/grey-frames.txt")], vec![], "inferno/flamegraph/grey-frames/grey-frames.svg"),
        case(
            "example perf stacks",
            vec![Input::File("inferno/collapse-perf/results/example-perf-stacks-collapsed.txt")],
            vec![],
            "inferno/flamegraph/example-perf-stacks/example-perf-stacks.svg",
        ),
        case("sorted input", vec![Input::File(VERTX)], vec![], VERTX_SVG),
        case("unsorted input", vec![Input::File(unsorted)], vec![], VERTX_SVG),
        case(
            "reversed stacks",
            vec![Input::Reversed(unsorted)],
            vec![],
            "inferno/flamegraph/perf-vertx-stacks/perf-vertx-stacks-01-collapsed-all-reversed-stacks.svg",
        ),
        case("austin", vec![Input::File("inferno/flamegraph/austin/flames.txt")], vec![], "inferno/flamegraph/austin/flame.svg"),
    ];
    v.push(FlameCase {
        name: "differential as --diff BEFORE AFTER".into(),
        inputs: vec![Input::Column(DIFF, 0), Input::Column(DIFF, 1)],
        flags: vec![],
        svg: "inferno/flamegraph/differential/diff.svg",
        diff: true,
    });
    v
}

/// A case that must fail: the java input against the vertx SVG (the
/// comparison can tell graphs apart).
pub fn wrong_pairing() -> FlameCase {
    FlameCase {
        name: "control".into(),
        inputs: vec![Input::File("flamegraph-pl-fork-lastsample/test/results/perf-java-stacks-01-collapsed-all.txt")],
        flags: vec![],
        svg: VERTX_SVG,
        diff: false,
    }
}

/// A frame as F1 compares it: (depth, name, fg:x, fg:w).
pub type Frame = (usize, String, u64, u64);

/// The frames of an SVG, inferno's or ours, sorted.
pub fn frames(svg: &str) -> Vec<Frame> {
    let mut raw: Vec<(i64, String, u64, u64)> = Vec::new();
    let mut rest = svg;
    while let Some(i) = rest.find("<title>") {
        rest = &rest[i + 7..];
        let Some(end) = rest.find("</title>") else { break };
        let title = unxml(&rest[..end]);
        rest = &rest[end..];
        let Some(r) = rest.find("<rect") else { break };
        let rect_end = rest[r..].find("/>").map_or(rest.len(), |e| r + e);
        let rect = &rest[r..rect_end];
        // A <title> not followed by its frame's <rect> in the same <g>.
        if rest[..r].contains("<title>") || rest[..r].contains("<g") && !rest[..r].contains("</title>") {
            continue;
        }
        let attr = |name: &str| {
            let key = format!(" {name}=\"");
            rect.find(&key).map(|a| &rect[a + key.len()..]).and_then(|v| v.split('"').next()).map(str::to_string)
        };
        let (Some(y), Some(x), Some(w)) = (attr("y"), attr("fg:x"), attr("fg:w")) else { continue };
        let y: f64 = y.parse().unwrap_or(0.0);
        raw.push((y as i64, frame_name(&title), x.parse().unwrap_or(0), w.parse().unwrap_or(0)));
    }
    // Depth: the rank of a frame's row counted from the root's (`all`, the widest).
    let Some(root_y) = raw.iter().max_by_key(|f| (f.3, f.1 == "all")).map(|f| f.0) else { return Vec::new() };
    let mut rows: Vec<i64> = raw.iter().map(|f| (f.0 - root_y).abs()).collect();
    rows.sort_unstable();
    rows.dedup();
    let mut out: Vec<Frame> = raw
        .into_iter()
        .map(|(y, n, x, w)| (rows.binary_search(&(y - root_y).abs()).unwrap_or(0), n, x, w))
        .collect();
    out.sort();
    out
}

/// F1: the title before ` (NUMBER ...`, exactly: blanks included (a last
/// frame of blanks only, perf's symbol " " in perf-vertx-stacks-01, is
/// the frame "" in inferno's graphs and must be in ours).
fn frame_name(title: &str) -> String {
    let mut cut = title.len();
    for (i, _) in title.match_indices(" (") {
        if title[i + 2..].starts_with(|c: char| c.is_ascii_digit()) {
            cut = i;
        }
    }
    title[..cut].to_string()
}

fn unxml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let Some(e) = rest.find(';') else { break };
        let ent = &rest[1..e];
        let c = match ent {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ if ent.starts_with("#x") => u32::from_str_radix(&ent[2..], 16).ok().and_then(char::from_u32),
            _ if ent.starts_with('#') => ent[1..].parse().ok().and_then(char::from_u32),
            _ => None,
        };
        match c {
            Some(c) => {
                out.push(c);
                rest = &rest[e + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The file an input becomes (emulations written to a scratch file).
fn materialise(input: &Input, n: usize) -> PathBuf {
    let read = |rel: &str| String::from_utf8_lossy(&std::fs::read(peer(rel).unwrap()).unwrap()).into_owned();
    let (text, tag) = match input {
        Input::File(rel) => return peer(rel).unwrap(),
        Input::Reversed(rel) => (
            read(rel)
                .lines()
                .filter_map(|l| l.trim().rsplit_once(' '))
                .map(|(s, v)| format!("{} {v}\n", s.split(';').rev().collect::<Vec<_>>().join(";")))
                .collect::<String>(),
            "rev",
        ),
        Input::Column(rel, col) => (
            read(rel)
                .lines()
                .filter_map(|l| {
                    let mut w = l.trim().rsplitn(3, ' ');
                    let (after, before, stack) = (w.next()?, w.next()?, w.next()?);
                    Some(format!("{stack} {}\n", if *col == 0 { before } else { after }))
                })
                .collect::<String>(),
            "col",
        ),
    };
    let p = crate::util::scratch(&format!("peersuite-{tag}-{n}-{}", std::process::id())).join("input.txt");
    std::fs::write(&p, text).unwrap();
    p
}

/// Draw the case and compare its frames with inferno's SVG.
pub fn check(c: &FlameCase) -> Result<(), String> {
    let files: Vec<PathBuf> = c.inputs.iter().enumerate().map(|(i, inp)| materialise(inp, i)).collect();
    // F2: inferno drops boxes under 0.1 px of 1180 px.
    let mut args: Vec<String> = vec!["--min-width".into(), "0.00847457627118644".into()];
    args.extend(c.flags.iter().map(|s| s.to_string()));
    if c.diff {
        args.push("--diff".into());
    }
    args.extend(files.iter().map(|p| p.to_string_lossy().into_owned()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run("flame", &argv, b"");
    if !out.status.success() {
        return Err(format!("flame failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    let ours = frames(&String::from_utf8_lossy(&out.stdout));
    let want = frames(&String::from_utf8_lossy(&std::fs::read(peer(c.svg).unwrap()).unwrap()));
    if want.is_empty() {
        return Err(format!("no frames read from {}", c.svg));
    }
    let missing: Vec<&Frame> = want.iter().filter(|f| ours.binary_search(f).is_err()).collect();
    let extra: Vec<&Frame> = ours.iter().filter(|f| want.binary_search(f).is_err()).collect();
    if missing.is_empty() && extra.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} frames, inferno {}: {} missing (first {:?}), {} extra (first {:?})",
        ours.len(),
        want.len(),
        missing.len(),
        missing.first(),
        extra.len(),
        extra.first()
    ))
}
