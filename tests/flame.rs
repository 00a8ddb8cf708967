//! Tests of flame: the SVG parses as XML, names are escaped, colours follow
//! the documented kinds, widths follow the values, and inputs nobody here
//! wrote (FlameGraph, bcc, perf) draw the same frames as before (golden).

mod util;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use quick_xml::events::Event;
use util::{golden, ok, run, scratch, testdata};

/// One frame box of the SVG.
#[derive(Debug, Clone)]
struct Frame {
    title: String,
    fill: (u8, u8, u8),
    x: u64,
    w: u64,
    y: u64,
    label: String,
}

impl Frame {
    /// The name: title text before the last ` (`.
    fn name(&self) -> &str {
        &self.title[..self.title.rfind(" (").unwrap()]
    }
}

/// Parse the whole SVG with a real XML parser; return the frames and the
/// text of every `<text>` outside them.
fn parse(svg: &str) -> (Vec<Frame>, Vec<String>) {
    let mut r = quick_xml::Reader::from_str(svg);
    let mut frames = Vec::new();
    let mut texts = Vec::new();
    let mut cur: Option<Frame> = None;
    let mut in_el = String::new();
    loop {
        match r.read_event().unwrap_or_else(|e| panic!("SVG is not XML at {}: {e}", r.buffer_position())) {
            Event::Eof => break,
            Event::Start(e) => {
                let name = String::from_utf8(e.name().as_ref().to_vec()).unwrap();
                if name == "g" {
                    cur = Some(Frame { title: String::new(), fill: (0, 0, 0), x: 0, w: 0, y: 0, label: String::new() });
                }
                in_el = name;
            }
            Event::Empty(e) if e.name().as_ref() == b"rect" => {
                if let Some(f) = cur.as_mut() {
                    for a in e.attributes() {
                        let a = a.unwrap();
                        let v = a.unescape_value().unwrap().to_string();
                        match a.key.as_ref() {
                            b"fill" => f.fill = rgb(&v),
                            b"fg:x" => f.x = v.parse().unwrap(),
                            b"fg:w" => f.w = v.parse().unwrap(),
                            b"y" => f.y = v.parse().unwrap(),
                            _ => {}
                        }
                    }
                }
            }
            Event::Text(t) => {
                let t = t.unescape().unwrap().to_string();
                match (cur.as_mut(), in_el.as_str()) {
                    (Some(f), "title") => f.title.push_str(&t),
                    (Some(f), "text") => f.label.push_str(&t),
                    (None, "text") => texts.push(t),
                    _ => {}
                }
            }
            Event::End(e) => {
                if e.name().as_ref() == b"g" {
                    frames.push(cur.take().unwrap());
                }
                in_el.clear();
            }
            _ => {}
        }
    }
    (frames, texts)
}

fn rgb(v: &str) -> (u8, u8, u8) {
    let inner = v.strip_prefix("rgb(").and_then(|s| s.strip_suffix(')')).unwrap_or_else(|| panic!("fill {v}"));
    let c: Vec<u8> = inner.split(',').map(|x| x.trim().parse().unwrap()).collect();
    (c[0], c[1], c[2])
}

fn frames_of(svg: &str) -> Vec<Frame> {
    parse(svg).0
}

fn find<'a>(fr: &'a [Frame], name: &str) -> &'a Frame {
    fr.iter().find(|f| f.name() == name).unwrap_or_else(|| panic!("no frame {name:?} in {:#?}", titles(fr)))
}

fn titles(fr: &[Frame]) -> Vec<&str> {
    fr.iter().map(|f| f.title.as_str()).collect()
}

// The documented colour ranges (flame --help, tools/flame/src/render.rs).
fn is_on_user((r, g, b): (u8, u8, u8)) -> bool {
    (205..=255).contains(&r) && g <= 230 && b <= 55
}
fn is_on_kernel((r, g, b): (u8, u8, u8)) -> bool {
    (190..=255).contains(&r) && (90..=155).contains(&g) && b == 0 && r - g == 100
}
fn is_off_user((r, g, b): (u8, u8, u8)) -> bool {
    r == g && (80..=140).contains(&r) && (190..=245).contains(&b)
}
fn is_off_kernel((r, g, b): (u8, u8, u8)) -> bool {
    g == b && (50..=110).contains(&r) && (165..=220).contains(&g)
}
fn is_gpu_user((r, g, b): (u8, u8, u8)) -> bool {
    r == b && (40..=90).contains(&r) && (175..=255).contains(&g)
}

const KINDS: &str = "\
main;compute;crunch_[c] 400
main;compute;sys_write_[k]_[c] 100
main;wait;futex_wait_[k];[sleep]_[o] 300
main;wait;[runnable]_[o] 50
main;launch;gemm_kernel_[g] 150
";

#[test]
fn colours_follow_kinds_and_markers_never_show() {
    let svg = ok("flame", &[], KINDS.as_bytes());
    let (fr, _) = parse(&svg);
    for f in &fr {
        for m in ["_[c]", "_[o]", "_[g]", "_[k]"] {
            assert!(!f.title.contains(m) && !f.label.contains(m), "marker {m} shows in {f:?}");
        }
    }
    assert!(is_on_user(find(&fr, "crunch").fill), "{:?}", find(&fr, "crunch"));
    assert!(is_on_user(find(&fr, "compute").fill));
    assert!(is_on_kernel(find(&fr, "sys_write").fill), "{:?}", find(&fr, "sys_write"));
    assert!(is_off_user(find(&fr, "[sleep]").fill), "{:?}", find(&fr, "[sleep]"));
    assert!(is_off_user(find(&fr, "[runnable]").fill));
    assert!(is_off_user(find(&fr, "wait").fill));
    assert!(is_off_kernel(find(&fr, "futex_wait").fill), "{:?}", find(&fr, "futex_wait"));
    assert!(is_gpu_user(find(&fr, "gemm_kernel").fill), "{:?}", find(&fr, "gemm_kernel"));
    assert!(is_gpu_user(find(&fr, "launch").fill));
    // main: 500 on, 350 off, 150 GPU -> on-CPU colour, the split in the tooltip.
    let main = find(&fr, "main");
    assert!(is_on_user(main.fill), "{main:?}");
    assert_eq!(main.title, "main (1.00 ms, 100.00%; on-CPU 500 us, off-CPU 350 us, GPU 150 us)");
}

/// The same kinds from stream records (kind field, symbolized frames).
#[test]
fn stream_kinds_and_ns() {
    let stream = [
        r#"{"type":"header","format":"wallclock","version":"1.0","tool":"test","tool_version":"0","clock":"monotonic"}"#,
        r#"{"type":"stack","kind":"on","pid":7,"tid":7,"comm":"app","frames":[{"func":"main"},{"func":"spin"}],"ns":2000000,"count":2}"#,
        r#"{"type":"stack","kind":"off","state":"D","pid":7,"tid":7,"comm":"app","frames":[{"func":"main"},{"func":"fsync"},{"func":"ext4_sync_file","kernel":true}],"ns":6000000,"count":1}"#,
        r#"{"type":"stack","kind":"gpu","pid":7,"tid":7,"comm":"app","frames":[{"func":"main"},{"func":"matmul"}],"ns":12345678,"count":1}"#,
        r#"{"type":"stack","kind":"off","state":"S","pid":7,"tid":7,"comm":"app","ustack":[4198400,4198964],"ns":1000,"count":1}"#,
    ]
    .join("\n");
    let fr = frames_of(&ok("flame", &["--min-width", "0"], stream.as_bytes()));
    assert!(is_on_user(find(&fr, "spin").fill));
    // The off-CPU state becomes the leaf frame ([io] for D) when frames lack it.
    let io = find(&fr, "[io]");
    assert!(is_off_user(io.fill));
    assert_eq!(io.w, 6_000_000);
    assert!(is_off_kernel(find(&fr, "ext4_sync_file").fill));
    let mm = find(&fr, "matmul");
    assert!(is_gpu_user(mm.fill));
    assert!(mm.title.starts_with("matmul (12.3 ms, "), "{}", mm.title);
    // Raw addresses before stacksym: hex, root first.
    assert_eq!(find(&fr, "0x401234").w, 1000);
    assert!(is_off_user(find(&fr, "0x401000").fill));
    // main is GPU-dominated (12.3 ms of 20.3 ms).
    assert!(is_gpu_user(find(&fr, "main").fill));
}

#[test]
fn names_are_escaped() {
    let input = "main;std::vector<int>::push_back;a&b;say \"hi\";x<y>z 7\nmain;<lambda> 3\n";
    let svg = ok("flame", &[], input.as_bytes());
    assert!(!svg.contains("<int>") && !svg.contains("<lambda>") && !svg.contains("a&b"), "unescaped name in SVG");
    let (fr, _) = parse(&svg);
    for name in ["std::vector<int>::push_back", "a&b", "say \"hi\"", "x<y>z", "<lambda>"] {
        let f = find(&fr, name);
        assert!(f.label.is_empty() || name.starts_with(f.label.trim_end_matches("..")), "{f:?}");
    }
    assert_eq!(find(&fr, "<lambda>").w, 3);
}

/// Names inferno's parser would misread (a trailing number looks like a
/// second value column; `# ` starts a comment) are drawn as they are.
#[test]
fn names_inferno_would_misread() {
    // A leaf ending in a number, with its kind marker (as our tools write
    // it), is a name; without one, `stack BEFORE AFTER` is a two-count
    // (difffolded) line, drawn as a differential graph as inferno does.
    let fr = frames_of(&ok("flame", &[], "main;Interpreter 12_[c] 5\n".as_bytes()));
    assert_eq!(find(&fr, "Interpreter 12").w, 5);
    let svg = ok("flame", &[], "main;Interpreter 12 5\n".as_bytes());
    let fr = frames_of(&svg);
    assert_eq!(find(&fr, "Interpreter").w, 5);
    assert!(find(&fr, "Interpreter").title.contains("before 12"), "{}", find(&fr, "Interpreter").title);
    let rec = r##"{"type":"stack","kind":"on","frames":[{"func":"# not"},{"func":"a comment"}],"ns":2}"##;
    let fr = frames_of(&ok("flame", &[], rec.as_bytes()));
    assert_eq!(find(&fr, "# not").w, 2);
    assert_eq!(find(&fr, "all").w, 2);
}

#[test]
fn widths_are_proportional_to_values() {
    let input = "a;b 1\na;c 3\nd 6\n";
    let svg = ok("flame", &[], input.as_bytes());
    let (fr, _) = parse(&svg);
    let pct = |s: &str| -> f64 {
        let i = svg.find(&format!("<title>{s} (")).unwrap();
        let r = &svg[i..];
        let w = r.find("width=\"").unwrap() + 7;
        r[w..w + r[w..].find('%').unwrap()].parse().unwrap()
    };
    assert_eq!((find(&fr, "b").w, find(&fr, "c").w, find(&fr, "a").w, find(&fr, "d").w), (1, 3, 4, 6));
    assert!((pct("c") - 30.0).abs() < 1e-3 && (pct("d") - 60.0).abs() < 1e-3, "{} {}", pct("c"), pct("d"));
    assert_eq!(find(&fr, "all").w, 10);
    // Plain folded without markers: values are samples.
    assert_eq!(find(&fr, "d").title, "d (6 samples, 60.00%)");
    // --unit ms: shown as time.
    let fr = frames_of(&ok("flame", &["--unit", "ms"], input.as_bytes()));
    assert_eq!(find(&fr, "d").title, "d (6.00 ms, 60.00%)");
}

#[test]
fn stdin_and_file_argument_agree() {
    let d = scratch("flame-stdin-file");
    let p = d.join("kinds.folded");
    std::fs::write(&p, KINDS).unwrap();
    let from_file = ok("flame", &[p.to_str().unwrap()], b"");
    let from_stdin = ok("flame", &[], KINDS.as_bytes());
    assert_eq!(from_file, from_stdin);
    let out = d.join("out.svg");
    ok("flame", &[p.to_str().unwrap(), "-o", out.to_str().unwrap()], b"");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), from_stdin);
}

#[test]
fn empty_input_says_no_stacks() {
    // Nothing to draw: refused with a message, as flamegraph.pl and inferno do.
    for input in ["", "\n# only a comment\n"] {
        let out = run("flame", &[], input.as_bytes());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.trim().lines().count() == 1 && err.contains("no stacks"), "{err}");
    }
    // A capture with no stacks (a header, no stack record) is a graph that says so.
    let header = r#"{"type":"header","format":"wallclock","version":"1.3","tool":"offcputime","tool_version":"0","clock":"monotonic"}"#;
    let svg = ok("flame", &[], format!("{header}\n").as_bytes());
    let (fr, texts) = parse(&svg);
    assert!(fr.is_empty());
    assert!(texts.iter().any(|t| t == "no stacks"), "{texts:?}");
}

#[test]
fn bad_input_names_file_and_line() {
    let d = scratch("flame-bad");
    let p = d.join("bad.folded");
    std::fs::write(&p, "a;b 1\na;c 2\na;d notanumber\n").unwrap();
    let out = run("flame", &[p.to_str().unwrap()], b"");
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("bad.folded: line 3:"), "{err}");
    let out = run("flame", &[], b"{\"type\":\"stack\",\"kind\":\"sideways\"}\n");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(!out.status.success() && err.contains("<stdin>: line 1:"), "{err}");
    let out = run("flame", &["/nonexistent/x.folded"], b"");
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("/nonexistent/x.folded"));
}

#[test]
fn options_title_inverted_min_width() {
    let input = "a;b 1000\na;c 1\n";
    let svg = ok("flame", &["--title", "T&T", "--subtitle", "sub", "--width", "800"], input.as_bytes());
    let (fr, texts) = parse(&svg);
    assert!(texts.iter().any(|t| t == "T&T") && texts.iter().any(|t| t == "sub"), "{texts:?}");
    assert!(svg.contains("width=\"800\""));
    assert!(fr.iter().any(|f| f.name() == "c"));
    // Straight: the root is at the bottom; inverted: at the top.
    assert!(find(&fr, "all").y > find(&fr, "b").y);
    let fr = frames_of(&ok("flame", &["--inverted"], input.as_bytes()));
    assert!(find(&fr, "all").y < find(&fr, "b").y);
    // c is 0.1% of the total: gone at --min-width 0.5.
    let fr = frames_of(&ok("flame", &["--min-width", "0.5"], input.as_bytes()));
    assert!(!fr.iter().any(|f| f.name() == "c") && fr.iter().any(|f| f.name() == "b"));
}

#[test]
fn per_thread_files() {
    let stream = [
        r#"{"type":"header","format":"wallclock","version":"1.0","tool":"test","tool_version":"0","clock":"monotonic","pids":[100]}"#,
        r#"{"type":"thread","pid":100,"tid":100,"comm":"server"}"#,
        r#"{"type":"thread","pid":100,"tid":101,"comm":"pool-1","role":"worker"}"#,
        r#"{"type":"stack","kind":"on","pid":100,"tid":100,"comm":"server","frames":[{"func":"main"},{"func":"accept_loop"}],"ns":5000,"count":5}"#,
        r#"{"type":"stack","kind":"off","state":"S","pid":100,"tid":101,"comm":"pool-1","frames":[{"func":"run"},{"func":"wait"}],"ns":7000,"count":1}"#,
        r#"{"type":"stack","kind":"on","pid":100,"tid":102,"comm":"io thr/1","frames":[{"func":"io_loop"}],"ns":3000,"count":3}"#,
    ]
    .join("\n");
    let d = scratch("flame-per-thread");
    let dir = d.join("out");
    ok("flame", &["--split-dir", dir.to_str().unwrap()], stream.as_bytes());
    let mut names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    // Roles by the rule wcreport's file names use (accounting::role_for):
    // main thread, the record's role, else the name without its number.
    assert_eq!(names, ["thread_100_main.svg", "thread_101_worker.svg", "thread_102_io_thr.svg"]);
    let fr = |n: &str| frames_of(&std::fs::read_to_string(dir.join(n)).unwrap());
    let main = fr("thread_100_main.svg");
    assert_eq!(find(&main, "server (100)").w, 5000, "the root names the process");
    assert!(!main.iter().any(|f| f.name() == "wait" || f.name() == "io_loop"));
    let worker = fr("thread_101_worker.svg");
    assert_eq!(find(&worker, "server (100)").w, 7000);
    assert!(is_off_user(find(&worker, "[sleep]").fill));
    // Folded input has no threads: a clear error.
    let out = run("flame", &["--split-dir", dir.to_str().unwrap()], b"a;b 1\n");
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--split-dir"));

    // The old spelling, `--per-thread -o DIR`, writes the same files and
    // warns once, on stderr.
    let old = d.join("old");
    let out = run("flame", &["--per-thread", "-o", old.to_str().unwrap()], stream.as_bytes());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("flame: warning: --per-thread: Old spelling of --split-dir"), "{err}");
    assert!(out.stdout.is_empty());
    for n in &names {
        assert_eq!(std::fs::read(old.join(n)).unwrap(), std::fs::read(dir.join(n)).unwrap(), "{n}");
    }
    assert_eq!(std::fs::read_dir(&old).unwrap().count(), names.len());
}

#[test]
fn diff_colours_growth_red_and_shrink_blue() {
    let d = scratch("flame-diff");
    let (b, a) = (d.join("before.folded"), d.join("after.folded"));
    std::fs::write(&b, "main;grow 10\nmain;shrink 50\nmain;same 20\n").unwrap();
    std::fs::write(&a, "main;grow 60\nmain;shrink 10\nmain;same 20\n").unwrap();
    let fr = frames_of(&ok("flame", &["--diff", b.to_str().unwrap(), a.to_str().unwrap()], b""));
    let (gr, sh, sa) = (find(&fr, "grow"), find(&fr, "shrink"), find(&fr, "same"));
    assert_eq!((gr.w, sh.w, sa.w), (60, 10, 20));
    assert!(gr.fill.0 == 255 && gr.fill.2 < 100, "{gr:?}");
    assert!(sh.fill.2 == 255 && sh.fill.0 < 255, "{sh:?}");
    assert_eq!(sa.fill, (255, 255, 255));
    assert_eq!(gr.title, "grow (60 samples, 66.67%; before 10 samples, +50 samples)");
}

/// One stack met as a stack-table stack, as a record's own frames and
/// again in a second input (its table defined again) is one box of the
/// summed width, in a graph and in a diff.
#[test]
fn one_stack_from_several_records_is_one_box() {
    let d = scratch("flame-same-stack");
    let stream = [
        r#"{"type":"header","format":"wallclock","version":"1.3","tool":"test","tool_version":"0","clock":"monotonic"}"#,
        r#"{"type":"frame","id":0,"frame":{"func":"main"}}"#,
        r#"{"type":"frame","id":1,"frame":{"func":"spin"}}"#,
        r#"{"type":"stackdef","id":0,"frames":[0,1]}"#,
        r#"{"type":"stack","kind":"on","pid":7,"tid":7,"comm":"app","stack_id":0,"ns":1000,"count":1}"#,
        r#"{"type":"stack","kind":"on","pid":7,"tid":8,"comm":"app","frames":[{"func":"main"},{"func":"spin"}],"ns":500,"count":1}"#,
    ]
    .join("\n");
    let f = d.join("a.json");
    std::fs::write(&f, &stream).unwrap();
    let path = f.to_str().unwrap();
    let fr = frames_of(&ok("flame", &["--min-width", "0", path, path], b""));
    let spins: Vec<&Frame> = fr.iter().filter(|f| f.name() == "spin").collect();
    assert_eq!(spins.len(), 1, "{fr:?}");
    assert_eq!(spins[0].w, 3000);
    let fr = frames_of(&ok("flame", &["--diff", path, path], b""));
    assert_eq!(find(&fr, "spin").w, 1500);
    assert_eq!(find(&fr, "spin").fill, (255, 255, 255), "unchanged");
}

#[test]
fn help_has_examples() {
    let h = ok("flame", &["--help"], b"");
    assert!(h.contains("EXAMPLES:") && h.contains("--split-dir") && h.contains("off-CPU blue"));
    assert!(!h.contains("--per-thread"), "an old spelling is not in --help");
}

/// The frame list of an SVG, one line per box: name, width, fill.
fn frame_list(svg: &str) -> String {
    let mut fr = frames_of(svg);
    fr.sort_by(|a, b| (b.y, a.x).cmp(&(a.y, b.x)));
    fr.iter().map(|f| format!("{}\t{}\t{}\trgb{:?}\n", f.title, f.x, f.w, f.fill)).collect()
}

/// perf script sample headers (`comm pid [cpu] time: period event:`):
/// summed period per command name.
fn perf_periods(text: &str) -> BTreeMap<String, u64> {
    let mut per_comm: BTreeMap<String, u64> = BTreeMap::new();
    for l in text.lines().filter(|l| !l.starts_with(char::is_whitespace) && l.trim_end().ends_with(':')) {
        let w: Vec<&str> = l.split_whitespace().collect();
        *per_comm.entry(w[0].to_string()).or_default() += w[w.len() - 2].parse::<u64>().unwrap();
    }
    per_comm
}

/// Sum of the values of a folded file.
fn folded_total(p: &Path) -> u64 {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.rsplit_once(' ').unwrap().1.trim().parse::<u64>().unwrap())
        .sum()
}

#[test]
fn golden_flamegraph_collapsed() {
    for name in ["perf-java-stacks-01-collapsed-all.txt", "perf-numa-stacks-01-collapsed-all.txt"] {
        let Some(p) = testdata(&format!("flamegraph/{name}")) else { return };
        let svg = ok("flame", &[p.to_str().unwrap()], b"");
        let fr = frames_of(&svg);
        assert_eq!(find(&fr, "all").w, folded_total(&p), "{name}");
        assert!(fr.iter().any(|f| f.name() == "[unknown]"), "{name}");
        for f in &fr {
            assert!(!f.title.contains("_[k]") && !f.title.contains("_[j]"), "annotation shown: {}", f.title);
        }
        golden(&format!("flame/{name}.frames"), &frame_list(&svg));
    }
}

#[test]
fn golden_perf_script_raw() {
    let Some(p) = testdata("flamegraph/perf-dd-stacks-01.txt") else { return };
    let svg = ok("flame", &[p.to_str().unwrap()], b"");
    let fr = frames_of(&svg);
    // Weighted by period (cpu-clock: ns), as perf wrote them.
    let periods = perf_periods(&std::fs::read_to_string(&p).unwrap());
    assert_eq!(find(&fr, "all").w, periods.values().sum::<u64>());
    assert_eq!(find(&fr, "all").title, "all (111 ms, 100.00%)");
    assert!(fr.iter().any(|f| f.name() == "fsnotify") && fr.iter().any(|f| f.name() == "[unknown]"));
    golden("flame/perf-dd-stacks-01.frames", &frame_list(&svg));
}

#[test]
fn golden_bcc() {
    let Some(off) = testdata("bcc/offcputime-f-mixed.folded") else { return };
    let svg = ok("flame", &["--unit", "us", off.to_str().unwrap()], b"");
    let fr = frames_of(&svg);
    let all = find(&fr, "all");
    assert_eq!(all.w, folded_total(&off));
    assert!(all.title.starts_with(&format!("all ({}, ", wallclock_stream::units::human_ns(all.w * 1000))));
    golden("flame/offcputime-f-mixed.frames", &frame_list(&svg));

    let prof = testdata("bcc/profile-f-mixed.folded").unwrap();
    let svg = ok("flame", &[prof.to_str().unwrap()], b"");
    assert_eq!(find(&frames_of(&svg), "all").w, folded_total(&prof));
    golden("flame/profile-f-mixed.frames", &frame_list(&svg));
}

/// perf on this machine: a flame graph of `dd` whose widths are the sample
/// counts perf wrote.
#[test]
fn perf_record_on_this_machine() {
    if !Path::new("/usr/bin/perf").exists() && util::missing("/usr/bin/perf is not installed", "scripts/setup installs it (linux-perf)", "WALLCLOCK_SKIP_PERF") {
        return;
    }
    let d = scratch("flame-perf");
    let data = d.join("perf.data");
    let rec = Command::new("/usr/bin/perf")
        .args(["record", "-q", "-e", "cpu-clock", "-F", "2000", "-g", "-o"])
        .arg(&data)
        .args(["--", "dd", "if=/dev/zero", "of=/dev/null", "bs=64k", "count=200000"])
        .output()
        .unwrap();
    assert!(rec.status.success(), "perf record: {}", String::from_utf8_lossy(&rec.stderr));
    let script = Command::new("/usr/bin/perf").arg("script").arg("-i").arg(&data).output().unwrap();
    assert!(script.status.success(), "perf script: {}", String::from_utf8_lossy(&script.stderr));
    let text = String::from_utf8_lossy(&script.stdout).to_string();
    // Ground truth: the periods (ns of cpu-clock) perf wrote, per command name.
    let per_comm = perf_periods(&text);
    let dd = per_comm.get("dd").copied().unwrap_or(0);
    assert!(dd >= 20 * 500_000, "too few dd samples: {per_comm:?}");
    let script_file = d.join("perf.script");
    std::fs::write(&script_file, &text).unwrap();
    let svg = ok("flame", &["--min-width", "0", script_file.to_str().unwrap()], b"");
    let fr = frames_of(&svg);
    assert_eq!(find(&fr, "all").w, per_comm.values().sum::<u64>());
    assert_eq!(find(&fr, "dd").w, dd);
    let all = find(&fr, "all");
    assert_eq!(all.title, format!("all ({}, 100.00%)", wallclock_stream::units::human_ns(all.w)));
    // perf script through stdin draws the same graph.
    assert_eq!(ok("flame", &["--min-width", "0"], text.as_bytes()), svg);
}

/// The default title says what the stream covers; the root names the
/// process, or with several, what the graph covers with one root each.
#[test]
fn title_and_process_roots_from_the_stream() {
    let one = [
        r#"{"type":"header","format":"wallclock","version":"1.2","tool":"stackmerge","tool_version":"0","clock":"monotonic","pids":[100],"command":["./app","-x"],"start_ns":1000000000,"end_ns":3000000000}"#,
        r#"{"type":"thread","pid":100,"tid":100,"comm":"app"}"#,
        r#"{"type":"stack","kind":"on","pid":100,"tid":101,"comm":"pool","frames":[{"func":"main"}],"ns":5000,"count":5}"#,
    ]
    .join("\n");
    let svg = ok("flame", &[], one.as_bytes());
    let (fr, texts) = parse(&svg);
    assert!(texts[0].starts_with("./app -x (pid 100): wall-clock time, 2.00 s window from "), "{texts:?}");
    assert!(texts[0].ends_with(" UTC"), "{texts:?}");
    let root = find(&fr, "app (100)");
    assert_eq!((root.w, root.label.as_str()), (5000, "app (100)"));
    assert_eq!(find(&fr, "main").y, root.y - 16, "main sits right on the process root");

    let two = format!(
        "{one}\n{}\n{}",
        r#"{"type":"thread","pid":200,"tid":200,"comm":"gzip"}"#,
        r#"{"type":"stack","kind":"on","pid":200,"tid":200,"comm":"gzip","frames":[{"func":"deflate"}],"ns":3000,"count":3}"#
    );
    let fr = frames_of(&ok("flame", &[], two.as_bytes()));
    assert_eq!(find(&fr, "all 2 processes: app (100), gzip (200)").w, 8000);
    assert_eq!((find(&fr, "app (100)").w, find(&fr, "gzip (200)").w), (5000, 3000));
    // Folded input without a header: the generic title and root.
    let (fr, texts) = parse(&ok("flame", &[], b"a;b 3\n"));
    assert_eq!((texts[0].as_str(), find(&fr, "all").w), ("Flame Graph", 3));
}

/// The one-pass SVG draws the frames the input says: the multiset of
/// (frame name, width) of its boxes equals, for every distinct stack
/// prefix of the folded lines, (its last frame, the sum of the values of
/// the lines under it), plus the root with the total. Lines repeat stacks
/// (merged), carry kind markers and kernel frames, and share prefixes in
/// ways where plain string order would split a frame (`a;b` vs `a;b-x`).
#[test]
fn svg_frames_are_the_input_stacks() {
    let names = ["main", "run", "run-x", "poll", "read_[k]", "vfs_read_[k]"];
    let mut input = String::new();
    let mut want: BTreeMap<Vec<&str>, u64> = BTreeMap::new();
    let mut x: u64 = 12345;
    let mut total = 0;
    for _ in 0..3000 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let depth = 1 + (x >> 60) as usize % 6;
        let frames: Vec<&str> =
            (0..depth).map(|i| names[((x >> (8 * i)) as usize + i) % 6]).chain(["a", "b"].into_iter().take((x >> 50) as usize % 2)).collect();
        let v = 1 + (x >> 33) % 97;
        let marker = ["_[c]", "_[o]", ""][(x >> 40) as usize % 3];
        input.push_str(&format!("{}{marker} {v}\n", frames.join(";")));
        for n in 1..=frames.len() {
            *want.entry(frames[..n].to_vec()).or_default() += v;
        }
        total += v;
    }
    let svg = ok("flame", &["--min-width", "0"], input.as_bytes());
    let mut got: Vec<(String, u64)> = frames_of(&svg).iter().map(|f| (f.name().to_string(), f.w)).collect();
    let deannotate = |f: &str| f.strip_suffix("_[k]").unwrap_or(f).to_string();
    let mut expect: Vec<(String, u64)> = want.iter().map(|(p, v)| (deannotate(p.last().unwrap()), *v)).collect();
    expect.push(("all".to_string(), total));
    got.sort();
    expect.sort();
    assert_eq!(got.len(), expect.len(), "number of boxes");
    assert_eq!(got, expect);
}

/// A name escaped by the folded rule (`;` as `%3B`, wallclock-stream(5))
/// is shown as the name it is, in the tooltip and the label.
#[test]
fn escaped_names_are_shown_as_they_are() {
    let svg = ok("flame", &[], b"main;stage::<[u8%3B 8]>;leaf 5\nmain;50%25 done 1\n");
    let (fr, _) = parse(&svg);
    let stage = find(&fr, "stage::<[u8; 8]>");
    assert!(stage.label.is_empty() || stage.label.starts_with("stage::<[u8; "), "{stage:?}");
    find(&fr, "50% done");
    assert!(!svg.contains("%3B"), "an escape shows in the SVG");
}

/// A label too long for its box keeps its start, in the SVG and in the
/// browser (the script re-fits labels on load and zoom): a Python frame
/// shows its function, not the end of its file's path.
#[test]
fn cut_labels_keep_their_start() {
    let long = "py::handle_request:/srv/app/very/deep/package/path/of/the/service/handlers.py";
    let folded = format!("main;{long} 1\nmain;other 30\n");
    let svg = ok("flame", &["--width", "400"], folded.as_bytes());
    assert!(svg.contains("truncate_text_right = true"), "the browser's script cuts labels from the left");
    let (fr, _) = parse(&svg);
    let f = fr.iter().find(|f| f.title.starts_with(long)).expect("the Python frame's box");
    assert!(f.label.is_empty() || (f.label.starts_with("py::") && f.label.ends_with("..")), "label {:?}", f.label);
    let wide = ok("flame", &["--width", "4000"], folded.as_bytes());
    let (fr, _) = parse(&wide);
    let f = fr.iter().find(|f| f.title.starts_with(long)).unwrap();
    assert!(f.label.starts_with("py::handle_req") && f.label.ends_with(".."), "label {:?}", f.label);
}
