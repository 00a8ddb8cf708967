//! Man pages (section 1), shell completions and the flag index
//! (docs/flags-index.md) for every tool, rendered
//! from the same clap `Command` each binary parses, so they cannot drift;
//! `scripts/wallclock`'s from its definition in [`wallclock`], checked
//! against the script by tests/manpages.rs.

pub mod flags;
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

/// The files to write: (relative path, contents).
pub fn render() -> Result<Vec<(String, Vec<u8>)>> {
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
    out.push(("docs/flags-index.md".to_string(), flags::index_md(&flags::all(&commands())).into_bytes()));
    Ok(out)
}

/// Write the files under `root`, or with `check` list the stale ones.
pub fn run(root: &Path, check: bool) -> Result<Vec<String>> {
    let mut stale = Vec::new();
    for (rel, data) in render()? {
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
