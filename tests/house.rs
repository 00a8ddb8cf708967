//! The house rules of issue 42, read from the source as a reviewer would:
//! no import circle between the modules of a crate, and no function of
//! the tools or the stream crate over 100 lines (tests may be longer: a
//! test reads top to bottom).
//!
//! A module's imports are the `crate::`/`super::` paths in its code (not
//! in its comments or its `mod tests`), each taken to the deepest module
//! it names. A function runs from its `fn` line to the `}` at its indent.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod util;

/// The crates' `src` folders: the stream crate and every tool.
fn crate_srcs() -> Vec<PathBuf> {
    let root = util::root();
    let mut v = vec![root.join("shared/src")];
    for e in std::fs::read_dir(root.join("tools")).unwrap() {
        let src = e.unwrap().path().join("src");
        if src.is_dir() {
            v.push(src);
        }
    }
    v.sort();
    v
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// A file's module path in its crate: `runtimes::python::reader`; the
/// crate root is empty.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut m: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        m.pop();
    }
    m
}

/// The code of a file without its comments and its `#[cfg(test)] mod tests`.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// The `crate::a::b` and `super::x` paths in `code`, as module paths from
/// the crate root (not yet cut to a module that exists).
fn paths(code: &str, module: &[String], is_dir_module: bool) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start).map(|i| i + from) {
            from = i + start.len();
            if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b':') {
                continue;
            }
            let end = code[i..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')).map_or(code.len(), |e| i + e);
            let mut parts = code[i..end].split("::").filter(|p| !p.is_empty());
            let mut base: Vec<String> = if start == "crate::" {
                parts.next();
                Vec::new()
            } else {
                // `super` of a file module is its parent's parent's child: the parent.
                let mut b = module.to_vec();
                if !is_dir_module {
                    b.pop();
                }
                b
            };
            let mut parts = parts.peekable();
            if start == "super::" {
                parts.next();
                while parts.peek() == Some(&"super") {
                    parts.next();
                    base.pop();
                }
            }
            base.extend(parts.map(str::to_string));
            out.push(base);
        }
    }
    out
}

/// The circles among a crate's modules: each strongly connected set of
/// more than one.
fn circles(src: &Path) -> Vec<Vec<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mods: BTreeMap<Vec<String>, PathBuf> = files.iter().map(|f| (module_of(src, f), f.clone())).collect();
    let mut edges: BTreeMap<&Vec<String>, BTreeSet<&Vec<String>>> = BTreeMap::new();
    for (m, f) in &mods {
        let dir_module = matches!(f.file_stem().and_then(|s| s.to_str()), Some("mod" | "lib" | "main"));
        let text = std::fs::read_to_string(f).unwrap();
        for full in paths(&code(&text), m, dir_module) {
            let to = (0..=full.len()).rev().find_map(|k| mods.get_key_value(&full[..k]).map(|(k, _)| k));
            if let Some(to) = to.filter(|to| *to != m) {
                edges.entry(m).or_default().insert(to);
            }
        }
    }
    // Which modules reach which; a circle is a set that reach each other.
    let reach = |from: &Vec<String>| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from];
        while let Some(m) = todo.pop() {
            for n in edges.get(m).into_iter().flatten() {
                if seen.insert(*n) {
                    todo.push(n);
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&Vec<String>, BTreeSet<&Vec<String>>> = mods.keys().map(|m| (m, reach(m))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for m in mods.keys() {
        let set: Vec<String> = mods.keys().filter(|n| reaches[m].contains(n) && reaches[n].contains(m)).map(|n| n.join("::")).collect();
        if set.len() > 1 && !out.contains(&set) {
            out.push(set);
        }
    }
    out
}

/// Functions of `text` over `max` lines: (name, first line, lines).
fn long_functions(text: &str, max: usize) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let indent = &l[..l.len() - t.len()];
        let t = t.trim_start_matches("pub(crate) ").trim_start_matches("pub(super) ").trim_start_matches("pub ");
        let t = t.trim_start_matches("const ").trim_start_matches("async ").trim_start_matches("unsafe ").trim_start_matches("extern \"C\" ");
        let Some(rest) = t.strip_prefix("fn ") else { continue };
        if l.trim_end().ends_with(';') || l.trim_end().ends_with('}') {
            continue;
        }
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let close = format!("{indent}}}");
        if let Some(end) = lines[i..].iter().position(|x| *x == close) {
            if end + 1 > max {
                out.push((name, i + 1, end + 1));
            }
        }
    }
    out
}

#[test]
fn no_import_circle_in_any_crate() {
    let mut found = Vec::new();
    for src in crate_srcs() {
        for c in circles(&src) {
            found.push(format!("{}: {}", src.strip_prefix(util::root()).unwrap().display(), c.join(" <-> ")));
        }
    }
    assert!(found.is_empty(), "import circles (a module that imports, through others, what imports it):\n{}", found.join("\n"));
}

#[test]
fn no_function_over_100_lines() {
    let mut found = Vec::new();
    for src in crate_srcs() {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for (name, line, n) in long_functions(&text, 100) {
                found.push(format!("{}:{line}: {name}, {n} lines", f.strip_prefix(util::root()).unwrap().display()));
            }
        }
    }
    assert!(found.is_empty(), "functions over 100 lines:\n{}", found.join("\n"));
}

/// The readers above find what they look for (a test that cannot fail
/// is no test): a circle and a long function written here are found.
#[test]
fn the_rules_find_what_they_look_for() {
    let dir = util::scratch("house");
    std::fs::create_dir_all(dir.join("src/room")).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "mod a;\nmod room;\n").unwrap();
    std::fs::write(dir.join("src/a.rs"), "use crate::room::b::B;\n// crate::nothing in a comment\n").unwrap();
    std::fs::write(dir.join("src/room/mod.rs"), "pub mod b;\n").unwrap();
    std::fs::write(dir.join("src/room/b.rs"), "pub struct B;\nfn f() { super::super::a::g() }\n").unwrap();
    assert_eq!(circles(&dir.join("src")), vec![vec!["a".to_string(), "room::b".to_string()]]);
    std::fs::write(dir.join("src/room/b.rs"), "pub struct B;\n").unwrap();
    assert!(circles(&dir.join("src")).is_empty());

    let body = "    let x = 1;\n".repeat(99);
    let text = format!("pub fn long() {{\n{body}}}\n\nfn short() {{\n}}\n");
    assert_eq!(long_functions(&text, 100), vec![("long".to_string(), 1, 101)]);
    assert!(long_functions(&text, 101).is_empty());
}
