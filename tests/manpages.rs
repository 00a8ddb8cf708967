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
