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

/// scripts/wallclock parses its flags in bash; its page is generated from
/// a definition in mangen (tools/mangen/src/wallclock.rs). The page, the
/// script's parser and its --help list the same flags (the parser also
/// takes the old spellings -f and --freq, which the page names in -F's
/// text).
#[test]
fn wallclock_page_parser_and_help_list_the_same_flags() {
    let script = std::fs::read_to_string(util::root().join("scripts/wallclock")).unwrap();
    let parser = &script[script.find("while [ $# -gt 0 ]; do").expect("the script's parse loop")..];
    let parser = &parser[..parser.find("esac").unwrap()];
    let arms = parser.lines().filter_map(|l| l.trim_start().split_once(") ").map(|(arm, _)| arm)).filter(|a| a.starts_with('-'));
    let mut parsed = flags_in(arms.flat_map(|a| a.split('|')));
    for old in ["-f", "--freq"] {
        assert!(parsed.remove(old), "the parser no longer takes {old}: say so in man/wallclock.1's -F");
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
