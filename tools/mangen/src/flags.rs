//! The flags of every tool side by side: which short letter and long name
//! each tool gives a meaning, so that one spelling keeps one meaning
//! across the toolkit. `docs/flags-index.md` is written from it, and
//! [`conflicts`] names any letter two tools spell differently.

use std::collections::BTreeMap;

use wallclock_stream::spellings;

/// One flag as a tool defines it.
#[derive(Debug, Clone)]
pub struct Flag {
    pub tool: String,
    pub short: Option<char>,
    pub long: Option<String>,
    pub help: String,
    /// Its value's name, or None for a switch.
    pub value: Option<String>,
    /// Its old spellings, which still work and warn (hidden aliases,
    /// `--freq`, `-d`; a hidden flag whose help says it is this one's old
    /// spelling, as wallclock_stream::spellings reads them).
    pub old: Vec<String>,
    /// Its default value, when clap has one.
    pub default: Option<String>,
}

/// Every visible flag of every tool (help and version left out).
pub fn all(commands: &[clap::Command]) -> Vec<Flag> {
    let mut out = Vec::new();
    for cmd in commands {
        let first = out.len();
        for a in cmd.get_arguments() {
            if a.is_hide_set() || a.is_positional() || matches!(a.get_id().as_str(), "help" | "version") {
                continue;
            }
            let takes = a.get_num_args().is_none_or(|n| n.takes_values()) && !matches!(a.get_action(), clap::ArgAction::SetTrue | clap::ArgAction::SetFalse | clap::ArgAction::Count);
            out.push(Flag {
                tool: cmd.get_name().to_string(),
                short: a.get_short(),
                long: a.get_long().map(str::to_string),
                help: first_sentence(&a.get_help().map(|h| h.to_string()).unwrap_or_default()),
                value: takes.then(|| a.get_value_names().and_then(|v| v.first()).map_or_else(|| a.get_id().as_str().to_uppercase(), |v| v.to_string())),
                old: old_spellings(a),
                default: Some(a.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect::<Vec<_>>().join(",")).filter(|d| !d.is_empty() && takes),
            });
        }
        // A hidden flag that is an old spelling ("Old spelling of --NEW
        // ...: `OLD` ..."): listed under --NEW.
        for a in cmd.get_arguments().filter(|a| spellings::is_old_flag(a)) {
            let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            let new = help.split_whitespace().find_map(|w| w.strip_prefix("--")).map(|w| w.trim_end_matches([':', ',', '.']).to_string());
            let old = help.split('`').nth(1).map(str::to_string).unwrap_or_else(|| spellings::spelling(a));
            if let Some(f) = out[first..].iter_mut().find(|f| f.long == new) {
                f.old.push(old);
            }
        }
    }
    out
}

/// A flag's hidden aliases: `-d`, `--delay`.
fn old_spellings(a: &clap::Arg) -> Vec<String> {
    let (longs, shorts) = spellings::hidden_aliases(a);
    shorts.iter().map(|c| format!("-{c}")).chain(longs.iter().map(|l| format!("--{l}"))).collect()
}

/// The help's first sentence (the index is a table, not the man page).
fn first_sentence(help: &str) -> String {
    let line = help.lines().next().unwrap_or("");
    match line.find(". ") {
        Some(i) => line[..=i].to_string(),
        None => line.to_string(),
    }
}

/// A short letter two tools tie to different long names, or a long name
/// two tools give different letters: `(spelling, [(tool, other spelling)])`.
pub fn conflicts(flags: &[Flag]) -> Vec<(String, Vec<(String, String)>)> {
    let mut by_short: BTreeMap<char, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut by_long: BTreeMap<&str, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for f in flags {
        let long = f.long.clone().unwrap_or_else(|| "(no long name)".into());
        if let Some(s) = f.short {
            by_short.entry(s).or_default().entry(long.clone()).or_default().push(f.tool.clone());
        }
        if let Some(l) = &f.long {
            let short = f.short.map_or_else(|| "(no letter)".to_string(), |c| format!("-{c}"));
            by_long.entry(l.as_str()).or_default().entry(short).or_default().push(f.tool.clone());
        }
    }
    let mut out = Vec::new();
    // A long name that takes a value in one tool and is a switch in
    // another (`--gpu FILE`, `--gpu`) has two meanings too.
    let mut takes: BTreeMap<&str, BTreeMap<bool, Vec<String>>> = BTreeMap::new();
    for f in flags {
        if let Some(l) = &f.long {
            takes.entry(l.as_str()).or_default().entry(f.value.is_some()).or_default().push(f.tool.clone());
        }
    }
    for (l, by) in takes.into_iter().filter(|(_, m)| m.len() > 1) {
        let what = |v: bool| if v { "a value" } else { "a switch" };
        out.push((format!("--{l}"), by.into_iter().flat_map(|(v, ts)| ts.into_iter().map(move |t| (t, what(v).to_string()))).collect()));
    }
    // Two defaults for one long name (`--wake-depth` 1 and 2) are two
    // meanings of a command line that leaves it out.
    let mut defaults: BTreeMap<&str, BTreeMap<&str, Vec<String>>> = BTreeMap::new();
    for f in flags {
        if let (Some(l), Some(d)) = (&f.long, &f.default) {
            defaults.entry(l.as_str()).or_default().entry(d.as_str()).or_default().push(f.tool.clone());
        }
    }
    for (l, by) in defaults.into_iter().filter(|(_, m)| m.len() > 1) {
        out.push((format!("--{l}"), by.into_iter().flat_map(|(d, ts)| ts.into_iter().map(move |t| (t, format!("default {d}")))).collect()));
    }
    for (s, longs) in by_short.into_iter().filter(|(_, m)| m.len() > 1) {
        out.push((format!("-{s}"), longs.into_iter().flat_map(|(l, ts)| ts.into_iter().map(move |t| (t, format!("--{l}")))).collect()));
    }
    for (l, shorts) in by_long {
        // A long name some tools also give a letter and others do not is
        // not two meanings; two different letters are.
        let letters: Vec<&String> = shorts.keys().filter(|k| k.starts_with('-')).collect();
        if letters.len() > 1 {
            out.push((format!("--{l}"), shorts.into_iter().flat_map(|(s, ts)| ts.into_iter().map(move |t| (t, s.clone()))).collect()));
        }
    }
    out
}

/// `docs/flags-index.md`: each spelling once, with the tools that take it
/// and what each says it means; the letters no tool takes last.
pub fn index_md(flags: &[Flag]) -> String {
    type Spelling = (Option<String>, Option<char>);
    let mut by: BTreeMap<Spelling, Vec<&Flag>> = BTreeMap::new();
    for f in flags {
        by.entry((f.long.clone(), f.short)).or_default().push(f);
    }
    let cell = |s: &str| s.replace('|', "\\|");
    let mut out = String::from(
        "# Every flag of every tool\n\n\
         Written by `cargo run --release -p mangen` from the tools' clap\n\
         definitions (`tests/manpages.rs` fails when it is stale), the\n\
         `wallclock` script's from its definition in mangen. docs/flags.md\n\
         says which spellings are shared on purpose. No letter means two\n\
         things: `mangen`'s tests fail when two tools tie one letter to\n\
         different long names, or one long name to a value and a switch.\n\n\
         | flag | value | tools | meaning |\n| --- | --- | --- | --- |\n",
    );
    for ((long, short), fs) in &by {
        let spelling = match (short, long) {
            (Some(s), Some(l)) => format!("`-{s}`, `--{l}`"),
            (Some(s), None) => format!("`-{s}`"),
            (None, Some(l)) => format!("`--{l}`"),
            (None, None) => continue,
        };
        let value = fs.iter().find_map(|f| f.value.clone()).map_or_else(String::new, |v| cell(&format!("`{v}`")));
        let tools: Vec<&str> = fs.iter().map(|f| f.tool.as_str()).collect();
        let mut meanings: Vec<String> = Vec::new();
        for f in fs {
            let m = if fs.len() > 1 { format!("{}: {}", f.tool, f.help) } else { f.help.clone() };
            if !meanings.iter().any(|x| x.ends_with(&f.help)) {
                meanings.push(m);
            }
        }
        out.push_str(&format!("| {spelling} | {value} | {} | {} |\n", tools.join(", "), cell(&meanings.join("; "))));
    }
    let used: std::collections::BTreeSet<char> = flags.iter().filter_map(|f| f.short).collect();
    // -h and -V are every tool's help and version.
    let free: String = ('a'..='z').chain('A'..='Z').filter(|c| !used.contains(c) && !matches!(c, 'h' | 'V')).collect();
    out.push_str(&format!("\nLetters no tool takes (`-h` and `-V` are every tool's help and version): `{free}`.\n"));
    out
}

#[cfg(test)]
mod tests {
    /// One letter, one long name, in every tool.
    #[test]
    fn each_letter_means_one_thing() {
        let f = super::all(&crate::all_commands());
        let c = super::conflicts(&f);
        assert!(c.is_empty(), "spellings with two meanings: {c:?}");
    }

    #[test]
    fn a_conflict_is_found() {
        let flag = |tool: &str, short: char, long: &str| super::Flag { tool: tool.into(), short: Some(short), long: Some(long.into()), help: String::new(), value: None, old: Vec::new(), default: None };
        let c = super::conflicts(&[flag("a", 'd', "duration"), flag("b", 'd', "delay"), flag("c", 'x', "delay")]);
        assert_eq!(c.len(), 2, "{c:?}");
        assert_eq!(c[0].0, "-d");
        assert_eq!(c[1].0, "--delay");
        let mut gpu = flag("wallclock", 'x', "gpu");
        gpu.short = None;
        let mut file = gpu.clone();
        (file.tool, file.value) = ("stackmerge".into(), Some("FILE".into()));
        let c = super::conflicts(&[gpu, file]);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].0, "--gpu");
    }

    /// The old spellings are read from the definitions, aliases and
    /// hidden old flags alike.
    #[test]
    fn old_spellings_are_found() {
        let f = super::all(&crate::all_commands());
        let old = |tool: &str, long: &str| f.iter().find(|x| x.tool == tool && x.long.as_deref() == Some(long)).map(|x| x.old.clone()).unwrap_or_default();
        assert_eq!(old("wctop", "interval"), ["-d", "--delay"]);
        assert_eq!(old("flame", "split-dir"), ["--per-thread -o DIR"]);
        assert_eq!(old("wallclock", "frequency"), ["-f", "--freq"]);
    }
}
