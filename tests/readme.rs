//! The README a newcomer reads first: short, the two set-up commands on
//! its first screen, and every link in it and in docs/ leading somewhere.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The targets of the Markdown links `](target)` in `text`, without anchors.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let end = rest.find(')').unwrap_or(rest.len());
        let target = rest[..end].split('#').next().unwrap_or("").to_string();
        if !target.is_empty() && !target.contains("://") {
            out.push(target);
        }
        rest = &rest[end..];
    }
    out
}

fn docs() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    v.sort();
    v
}

#[test]
fn readme_is_short_and_opens_with_the_two_commands() {
    let text = read(&root().join("README.md"));
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() <= 300, "README.md has {} lines (at most 300: move detail to docs/)", lines.len());
    for (n, l) in lines.iter().enumerate() {
        assert!(l.chars().count() <= 400, "README.md:{}: {} characters (at most 400)", n + 1, l.chars().count());
    }
    let first: Vec<&str> = lines.iter().take(40).copied().collect();
    for cmd in ["sudo scripts/demo/run", "sudo scripts/test"] {
        assert!(first.iter().any(|l| l.trim_start().starts_with(cmd)), "`{cmd}` is not among README.md's first 40 lines");
    }
}

#[test]
fn every_doc_is_linked_from_the_readme() {
    let readme = read(&root().join("README.md"));
    let linked = links(&readme);
    for d in docs() {
        let rel = format!("docs/{}", d.file_name().unwrap().to_string_lossy());
        assert!(linked.contains(&rel), "{rel} is not linked from README.md");
    }
}

#[test]
fn every_link_leads_to_a_file() {
    let mut files = vec![root().join("README.md")];
    files.extend(docs());
    for f in files {
        let dir = f.parent().unwrap();
        for l in links(&read(&f)) {
            assert!(dir.join(&l).exists(), "{}: the link to {l} leads nowhere", f.display());
        }
    }
}
