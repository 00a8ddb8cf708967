//! `tp:CATEGORY:NAME (FIELD, ...)`: a tracepoint's record fields, from its
//! format in tracefs. A `SEC("tracepoint")` program needs the event's id,
//! which only tracefs gives (libbpf reads events/CAT/NAME/id; neither BTF
//! nor a raw tracepoint's arguments have the record's layout for
//! DEFINE_EVENT and syscall events). Where tracefs is not mounted (this
//! machine) it is mounted at /sys/kernel/tracing, where perf and libbpf
//! look, for the attach, and unmounted after it: the system is left as it
//! was.

use std::path::Path;

use anyhow::{bail, Context, Result};

pub const ROOT: &str = "/sys/kernel/tracing";

/// Unmounts tracefs when dropped, if this capture mounted it.
pub struct Mounted(bool);

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.0 {
            let _ = std::process::Command::new("umount").arg(ROOT).status();
        }
    }
}

/// Mount tracefs unless it is there.
pub fn ensure() -> Result<Mounted> {
    if Path::new(ROOT).join("events").is_dir() {
        return Ok(Mounted(false));
    }
    let ok = std::process::Command::new("mount")
        .args(["-t", "tracefs", "nodev", ROOT])
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok || !Path::new(ROOT).join("events").is_dir() {
        bail!("tracefs is not mounted at {ROOT} and could not be (tp: needs it; run as root)");
    }
    Ok(Mounted(true))
}

/// One integer field of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub off: u16,
    pub size: u8,
    pub signed: bool,
}

/// The fields of a format file's text (common_* fields included).
pub fn parse_format(text: &str) -> Vec<(Field, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("field:") else { continue };
        let mut decl = "";
        let (mut off, mut size, mut signed) = (None, None, false);
        for part in rest.split(';') {
            let part = part.trim();
            if let Some(v) = part.strip_prefix("offset:") {
                off = v.parse().ok();
            } else if let Some(v) = part.strip_prefix("size:") {
                size = v.parse().ok();
            } else if let Some(v) = part.strip_prefix("signed:") {
                signed = v == "1";
            } else if decl.is_empty() {
                decl = part;
            }
        }
        // The name is the declaration's last word, less any [N].
        let name = decl.rsplit(' ').next().unwrap_or("").split('[').next().unwrap_or("").to_string();
        if let (Some(off), Some(size), false) = (off, size, name.is_empty()) {
            out.push((Field { name, off, size, signed }, decl.to_string()));
        }
    }
    out
}

/// The named fields of CATEGORY:NAME, in the order asked; an unknown
/// event or field, or one that is not an integer, is the error.
pub fn fields(category: &str, name: &str, wanted: &[String]) -> Result<Vec<Field>> {
    let path = Path::new(ROOT).join("events").join(category).join(name).join("format");
    let text = std::fs::read_to_string(&path).with_context(|| format!("no tracepoint {category}:{name} ({})", path.display()))?;
    let all = parse_format(&text);
    wanted.iter().map(|w| resolve(&all, w)).collect()
}

fn resolve(all: &[(Field, String)], w: &str) -> Result<Field> {
    let Some((f, decl)) = all.iter().find(|(f, _)| f.name == w) else {
        let names: Vec<&str> = all.iter().map(|(f, _)| f.name.as_str()).filter(|n| !n.starts_with("common_")).collect();
        bail!("no field '{w}' (it has: {})", names.join(", "));
    };
    if decl.contains('[') || decl.contains("__data_loc") || !matches!(f.size, 1 | 2 | 4 | 8) {
        bail!("field '{w}' ({decl}) is not an integer: only integer fields are read");
    }
    Ok(f.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORK: &str = "name: sched_process_fork\nformat:\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\tfield:__data_loc char[] parent_comm;\toffset:8;\tsize:4;\tsigned:0;\n\tfield:pid_t parent_pid;\toffset:12;\tsize:4;\tsigned:1;\n\tfield:unsigned int fd;\toffset:16;\tsize:8;\tsigned:0;\n";

    #[test]
    fn reads_integer_fields_and_refuses_others() {
        let all = parse_format(FORK);
        assert_eq!(resolve(&all, "parent_pid").unwrap(), Field { name: "parent_pid".into(), off: 12, size: 4, signed: true });
        assert_eq!(resolve(&all, "fd").unwrap().off, 16);
        assert!(resolve(&all, "parent_comm").unwrap_err().to_string().contains("not an integer"));
        let e = resolve(&all, "nope").unwrap_err().to_string();
        assert!(e.contains("no field 'nope'") && e.contains("parent_pid") && !e.contains("common_"), "{e}");
    }
}
