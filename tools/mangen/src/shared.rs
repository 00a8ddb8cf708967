//! docs/flags.md's table: every spelling two or more tools take, or that
//! has old spellings, with its meaning, its tools, its default and the old
//! spellings that still work and warn, written from the clap definitions
//! between two marker lines of the file (the prose around them is kept).

use std::collections::BTreeMap;

use anyhow::{bail, Result};

use crate::flags::Flag;

/// The line before the table.
pub const BEGIN: &str = "<!-- The table below is written by `cargo run --release -p mangen` from the tools' clap definitions; tests/manpages.rs fails when it is stale. -->";
/// The line after it.
pub const END: &str = "<!-- End of the generated table. -->";

/// What each shared spelling means, in a few words (by long name, or by
/// `-x` for a letter alone): the one thing the flag says in every tool.
/// A shared spelling missing here fails the generator.
const MEANINGS: &[(&str, &str)] = &[
    ("activate", "start recording at WHEN"),
    ("app", "the application's name on a Pyroscope server"),
    ("cgroup", "every process of a cgroup v2 directory and below it"),
    ("children", "also every descendant of the processes"),
    ("duration", "the capture's window, seconds"),
    ("every", "continuous profiling: windows of SECONDS back to back"),
    ("every-follow", "windows cut where another capture's `--every` cuts"),
    ("folded", "write folded lines"),
    ("frequency", "on-CPU sampling frequency, Hz"),
    ("from-exec", "the process is captured from its next exec"),
    ("gpu-from", "GPU input (a stream or folded lines)"),
    ("interval", "a live view's refresh, seconds"),
    ("json", "JSON for scripts"),
    ("kernel-stacks-only", "kernel stacks only"),
    ("kernel-threads-only", "kernel threads only"),
    ("max-threads", "threads tracked at most"),
    ("min-block-time", "blocks shorter than this (us) are counted as short"),
    ("no-objects", "no object (what a wait was for) per block"),
    ("output", "the output file"),
    ("pid", "processes: comma-separated PIDs (`gputrace` attaches to one; `wcdump` and `wctop` also take it without `-p`)"),
    ("prefix", "path prefix of the files written"),
    ("prepare", "load and attach at WHEN"),
    ("probe", "a probe of the program's own (repeatable)"),
    ("probe-binary", "the file of probes without a path"),
    ("push", "send the pprof profile to a Pyroscope-compatible server"),
    ("ready-file", "create FILE once attached"),
    ("ringbuf-mb", "the stacks' ring buffer, MiB"),
    ("roots", "the flame graph's or folded lines' process roots"),
    ("slower-than", "the slow spans are those longer than DURATION"),
    ("split-dir", "one file per thread into DIR"),
    ("tid", "threads: comma-separated TIDs"),
    ("timeline", "keep every event with its time (a timeline), a switch"),
    ("timeline-from", "read the timelines of these captures"),
    ("timeline-min", "with --timeline, blocks shorter than this (us) stay inside the running slice"),
    ("unit", "unit of folded values"),
    ("user-stacks-only", "user stacks only"),
    ("user-threads-only", "user threads only"),
    ("wake-depth", "with --wakers, follow wake-up chains N hops"),
    ("wakers", "who woke each block"),
];

/// The spellings the table lists, each with its tools' flags.
fn rows(flags: &[Flag]) -> BTreeMap<String, Vec<&Flag>> {
    let mut by: BTreeMap<String, Vec<&Flag>> = BTreeMap::new();
    for f in flags {
        let key = f.long.clone().or_else(|| f.short.map(|c| format!("-{c}"))).unwrap_or_default();
        by.entry(key).or_default().push(f);
    }
    by.retain(|_, fs| fs.len() > 1 || fs.iter().any(|f| !f.old.is_empty()));
    by
}

/// The table, in Markdown.
pub fn table(flags: &[Flag]) -> Result<String> {
    let cell = |s: &str| s.replace('|', "\\|");
    let mut out = String::from("| spelling | means | tools | default | old spellings (they warn; gone next release) |\n| --- | --- | --- | --- | --- |\n");
    for (key, fs) in rows(flags) {
        let Some((_, meaning)) = MEANINGS.iter().find(|(k, _)| *k == key) else {
            bail!("docs/flags.md: {key} is shared by {} but has no meaning in tools/mangen/src/shared.rs", fs.iter().map(|f| f.tool.as_str()).collect::<Vec<_>>().join(", "));
        };
        let f = fs[0];
        let value = f.value.as_deref().map_or_else(String::new, |v| format!(" {v}"));
        let spelling = match (fs.iter().find_map(|f| f.short), &f.long) {
            (Some(s), Some(l)) => format!("`-{s}{value}`, `--{l}{value}`"),
            (Some(s), None) => format!("`-{s}{value}`"),
            (None, Some(l)) => format!("`--{l}{value}`"),
            (None, None) => continue,
        };
        let tools: Vec<&str> = fs.iter().map(|f| f.tool.as_str()).collect();
        let mut defaults: Vec<String> = fs.iter().filter_map(|f| f.default.clone()).collect();
        defaults.sort();
        defaults.dedup();
        // Each old spelling once, with the tools that keep it.
        let mut old: Vec<(String, Vec<&str>)> = Vec::new();
        for f in &fs {
            for o in &f.old {
                match old.iter_mut().find(|(x, _)| x == o) {
                    Some((_, ts)) => ts.push(&f.tool),
                    None => old.push((o.clone(), vec![&f.tool])),
                }
            }
        }
        let old: Vec<String> = old.iter().map(|(o, ts)| format!("`{o}` ({})", ts.join(", "))).collect();
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            cell(&spelling),
            cell(meaning),
            tools.join(", "),
            cell(&defaults.join(", ")),
            cell(&old.join("; "))
        ));
    }
    Ok(out)
}

/// `current` (docs/flags.md) with the table between its markers written
/// anew.
pub fn splice(current: &str, flags: &[Flag]) -> Result<String> {
    let (Some(b), Some(e)) = (current.find(BEGIN), current.find(END)) else {
        bail!("docs/flags.md: the marker lines around the generated table are missing");
    };
    let after = b + BEGIN.len();
    if e < after {
        bail!("docs/flags.md: the table's end marker comes before its start");
    }
    Ok(format!("{}\n{}{}", &current[..after], table(flags)?, &current[e..]))
}
