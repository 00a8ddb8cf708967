//! Man pages (section 1), shell completions, the flag index
//! (docs/flags-index.md) and docs/flags.md's table of shared spellings for
//! every tool, rendered from the same clap `Command` each binary parses,
//! so they cannot drift; `scripts/wallclock`'s from its definition in
//! [`wallclock`], checked against the script by tests/manpages.rs.

pub mod flags;
pub mod shared;
pub mod wallclock;

use std::path::Path;

use anyhow::{Context, Result};

/// Every tool's command definition.
pub fn commands() -> Vec<clap::Command> {
    vec![
        offcputime::command(),
        oncputime::command(),
        gputrace::command(),
        stacksym::command(),
        stackmerge::command(),
        wcreport::command(),
        flame::command(),
        wcexport::command(),
        wcdump::command(),
        wcdump::top::command(),
    ]
}

/// Every tool's command definition and the wallclock script's.
pub fn all_commands() -> Vec<clap::Command> {
    let mut all = commands();
    all.push(wallclock::command());
    all
}

/// The files to write: (relative path, contents); `root` holds the
/// current docs/flags.md, whose prose is kept around its table.
pub fn render(root: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    for cmd in commands() {
        let name = cmd.get_name().to_string();
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd.clone()).date("2026-11").render(&mut page)?;
        out.push((format!("man/{name}.1"), page));
        let mut comp = Vec::new();
        clap_complete::generate(clap_complete::Shell::Bash, &mut cmd.clone(), name.clone(), &mut comp);
        out.push((format!("completions/{name}.bash"), comp));
    }
    // The script's page and completions, from its definition here.
    out.push(("man/wallclock.1".to_string(), wallclock::page()?));
    let mut comp = Vec::new();
    clap_complete::generate(clap_complete::Shell::Bash, &mut wallclock::command(), "wallclock", &mut comp);
    out.push(("completions/wallclock.bash".to_string(), comp));
    let all = flags::all(&all_commands());
    out.push(("docs/flags-index.md".to_string(), flags::index_md(&all).into_bytes()));
    let md = std::fs::read_to_string(root.join("docs/flags.md")).context("read docs/flags.md")?;
    out.push(("docs/flags.md".to_string(), shared::splice(&md, &all)?.into_bytes()));
    Ok(out)
}

/// Write the files under `root`, or with `check` list the stale ones.
pub fn run(root: &Path, check: bool) -> Result<Vec<String>> {
    let mut stale = Vec::new();
    for (rel, data) in render(root)? {
        let p = root.join(&rel);
        let current = std::fs::read(&p).ok();
        if current.as_deref() == Some(&data[..]) {
            continue;
        }
        stale.push(rel);
        if !check {
            std::fs::create_dir_all(p.parent().unwrap())?;
            std::fs::write(&p, &data).with_context(|| format!("write {}", p.display()))?;
        }
    }
    Ok(stale)
}
