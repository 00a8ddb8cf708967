//! The committed man pages and completions are what the tools' own clap
//! definitions render: a flag added without regenerating fails here.

mod util;

#[test]
fn man_pages_are_current() {
    let out = util::run_cmd(std::process::Command::new(util::bin("mangen")).arg("--check").arg(util::root()), b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_tool_has_a_page_with_examples() {
    for tool in ["offcputime", "oncputime", "gputrace", "stacksym", "stackmerge", "wcreport", "flame", "wcexport"] {
        let page = std::fs::read_to_string(util::root().join("man").join(format!("{tool}.1")))
            .unwrap_or_else(|e| panic!("man/{tool}.1: {e}"));
        assert!(page.contains("EXAMPLES"), "man/{tool}.1 has no EXAMPLES");
        let help = util::ok(tool, &["--help"], b"");
        assert!(help.contains("EXAMPLES"), "{tool} --help has no EXAMPLES");
    }
}

/// The flags (`-d`, `--cgroup`) in `text`'s words, each once, sorted.
fn flags_in<S: AsRef<str>>(words: impl Iterator<Item = S>) -> std::collections::BTreeSet<String> {
    words
        .filter_map(|w| {
            let w = w.as_ref().trim_end_matches([',', ')']);
            let flag = w.len() > 1 && w.starts_with('-') && w != "--" && w[1..].chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
            flag.then(|| w.to_string())
        })
        .collect()
}

/// scripts/wallclock's old spellings, which still work and warn for one
/// release (tools/mangen/src/wallclock.rs declares them as hidden aliases).
const OLD: [&str; 3] = ["-f", "--freq", "-o"];

/// scripts/wallclock parses its flags in bash; its page is generated from
/// a definition in mangen (tools/mangen/src/wallclock.rs). The page, the
/// script's parser and its --help list the same flags (the parser also
/// takes the old spellings [`OLD`], which the page names in the text of -F
/// and --prefix, and --help under "old spellings").
#[test]
fn wallclock_page_parser_and_help_list_the_same_flags() {
    let script = std::fs::read_to_string(util::root().join("scripts/wallclock")).unwrap();
    let parser = &script[script.find("while [ $# -gt 0 ]; do").expect("the script's parse loop")..];
    let parser = &parser[..parser.find("esac").unwrap()];
    let arms = parser.lines().filter_map(|l| l.trim_start().split_once(") ").map(|(arm, _)| arm)).filter(|a| a.starts_with('-'));
    let mut parsed = flags_in(arms.flat_map(|a| a.split('|')));
    for old in OLD {
        assert!(parsed.remove(old), "the parser no longer takes {old}: drop it from OLD, man/wallclock.1 and --help");
    }

    let page = std::fs::read_to_string(util::root().join("man/wallclock.1")).unwrap();
    let opts = &page[page.find(".SH OPTIONS").unwrap()..];
    let opts = &opts[..opts[1..].find(".SH ").unwrap()];
    let heads = opts.split(".TP\n").skip(1).filter_map(|e| e.lines().next());
    // An entry's first line: `\fB\-C\fR, \fB\-\-children\fR`.
    let on_page = flags_in(heads.flat_map(|h| h.split("\\fB").skip(1).map(|w| w.split("\\fR").next().unwrap_or("").replace("\\-", "-"))));

    let help = std::process::Command::new("bash").arg(util::root().join("scripts/wallclock")).arg("--help").output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let options = &help[help.find("\noptions:\n").expect("an options: section in --help")..];
    let options = &options[..options.find("\n\n").unwrap_or(options.len())];
    let in_help = flags_in(options.lines().filter(|l| l.starts_with("  -")).flat_map(|l| l.trim_start().split("  ").next().unwrap().split_whitespace()));

    assert_eq!(on_page, parsed, "man/wallclock.1 (regenerate it from tools/mangen/src/wallclock.rs) against the script's parser");
    assert_eq!(in_help, parsed, "wallclock --help against the script's parser");
}

/// Each of scripts/wallclock's old spellings still parses, as its new one
/// does, and warns once on stderr; stdout is the same (here --help, which
/// the parse reaches after them: no capture needed).
#[test]
fn wallclock_old_spellings_work_and_warn() {
    let wallclock = |args: &[&str]| {
        std::process::Command::new("bash").arg(util::root().join("scripts/wallclock")).args(args).output().unwrap()
    };
    let new = wallclock(&["-F", "99", "--prefix", "x", "--help"]);
    assert!(new.status.success() && new.stderr.is_empty(), "{}", String::from_utf8_lossy(&new.stderr));
    for (args, old, now) in [
        (&["-f", "99", "--prefix", "x", "--help"][..], "-f", "-F/--frequency"),
        (&["--freq", "99", "--prefix", "x", "--help"][..], "--freq", "-F/--frequency"),
        (&["-F", "99", "-o", "x", "--help"][..], "-o", "--prefix"),
    ] {
        let out = wallclock(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && out.stdout == new.stdout, "{args:?}: {err}");
        assert_eq!(err, format!("wallclock: warning: {old} is an old spelling of {now}, which means the same; {old} goes in the next release\n"));
    }
    // A value that looks like an old spelling is a value.
    let out = wallclock(&["--prefix", "-o", "--help"]);
    assert!(out.status.success() && out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}
