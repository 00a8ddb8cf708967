//! Time without a name: per module, the time of the stacks whose
//! innermost user frame has no symbol (`module+0x...`), and what to do
//! about it (install the package's debug symbols, or place the debug file
//! where debuggers look).
//!
//! The hint looks at this machine: the file's owning Debian package
//! (`dpkg-query -S`), whether the file still has a symbol table, and
//! whether a debug file for its build id is already installed. A report
//! read elsewhere than the capture still names the build id's path.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use serde::Serialize;

use crate::functions::FunctionTime;

/// The module name given to bare `0x...` frames (an unsymbolized stream).
pub const UNSYMBOLIZED: &str = "(unsymbolized)";

#[derive(Debug, Clone, Serialize)]
pub struct UnnamedModule {
    pub module: String,
    /// Time of the stacks whose innermost user frame is in this module.
    pub ns: u64,
    /// The part of it whose innermost user frame has no name.
    pub unnamed_ns: u64,
    pub pct: f64,
    /// Why, as far as this machine can tell: `stripped`, `not on this machine`...
    pub why: String,
    /// What to do, one line.
    pub hint: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
}

/// Modules with unnamed time, most unnamed time first.
pub fn unnamed_modules<'a>(
    funcs: impl Iterator<Item = &'a FunctionTime>,
    build_ids: &BTreeMap<String, String>,
) -> Vec<UnnamedModule> {
    let mut by: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for f in funcs {
        let m = match (&f.module, f.unnamed) {
            (Some(m), _) => m.clone(),
            (None, true) => UNSYMBOLIZED.to_string(),
            (None, false) => continue,
        };
        let e = by.entry(m).or_default();
        e.0 += f.ns;
        if f.unnamed {
            e.1 += f.ns;
        }
    }
    let mut v: Vec<UnnamedModule> = by
        .into_iter()
        .filter(|(_, (_, un))| *un > 0)
        .map(|(module, (ns, unnamed_ns))| {
            let build_id = build_ids.get(&module).cloned();
            let (why, hint, package) = advice(&module, build_id.as_deref());
            let pct = if ns > 0 { unnamed_ns as f64 * 100.0 / ns as f64 } else { 0.0 };
            UnnamedModule { module, ns, unnamed_ns, pct, why, hint, package, build_id }
        })
        .collect();
    v.sort_by(|a, b| b.unnamed_ns.cmp(&a.unnamed_ns).then_with(|| a.module.cmp(&b.module)));
    v
}

/// Where gdb, perf and blazesym look for the debug file of a build id.
pub fn build_id_path(id: &str) -> Option<String> {
    (id.len() > 2 && id.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| format!("/usr/lib/debug/.build-id/{}/{}.debug", &id[..2], &id[2..]))
}

fn advice(module: &str, build_id: Option<&str>) -> (String, String, Option<String>) {
    if module == UNSYMBOLIZED {
        return ("addresses only".into(), "the stream was not symbolized: pipe it through stacksym".into(), None);
    }
    if !module.starts_with('/') {
        return (
            "outside every mapped file".into(),
            "JIT code without a perf map (perf-PID.map), or code of a process whose mappings were not read".into(),
            None,
        );
    }
    let debug = build_id.and_then(build_id_path);
    let place = match &debug {
        Some(p) => format!("place the debug file at {p}"),
        None => "place the debug file under /usr/lib/debug/.build-id/".to_string(),
    };
    if let Some(p) = debug.as_deref().filter(|p| Path::new(p).exists()) {
        return ("debug file not used".into(), format!("{p} is installed: symbolize again with stacksym"), None);
    }
    let why = match has_symtab(Path::new(module)) {
        None => "not on this machine",
        Some(false) => "stripped",
        Some(true) => "no symbol covers these addresses",
    };
    let package = owner_package(module);
    let hint = match &package {
        Some(pkg) => format!("install its debug symbols (apt install {}, or {place})", debug_package(pkg)),
        None => format!("build it with -g and keep its symbols, or {place}"),
    };
    (why.into(), hint, package)
}

/// Debian's detached debug symbols: `-dbgsym` packages, except a few.
fn debug_package(pkg: &str) -> String {
    match pkg {
        "libc6" | "libc6-amd64" => "libc6-dbg".to_string(),
        _ => format!("{pkg}-dbgsym"),
    }
}

/// The Debian package that installed a file (usr-merged paths tried both ways).
fn owner_package(path: &str) -> Option<String> {
    let mut tries = vec![path.to_string()];
    if let Ok(c) = std::fs::canonicalize(path) {
        tries.push(c.to_string_lossy().into_owned());
    }
    for t in tries.clone() {
        match t.strip_prefix("/usr") {
            Some(rest) if rest.starts_with('/') => tries.push(rest.to_string()),
            _ => tries.push(format!("/usr{t}")),
        }
    }
    tries.iter().find_map(|p| {
        let out = Command::new("dpkg-query").args(["-S", p]).stderr(Stdio::null()).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().next().filter(|_| out.status.success())?;
        // `libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6`; diversions have other forms.
        let pkg = line.split(": ").next()?.split(',').next()?.trim();
        let pkg = pkg.split(':').next()?;
        (!pkg.is_empty() && !pkg.contains(' ')).then(|| pkg.to_string())
    })
}

/// Does this ELF file have a `.symtab` (SHT_SYMTAB)? None when it cannot
/// be read as a 64-bit little-endian ELF file.
fn has_symtab(path: &Path) -> Option<bool> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let mut eh = [0u8; 64];
    f.read_exact(&mut eh).ok()?;
    if &eh[..4] != b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as u64;
    let shoff = u64::from_le_bytes(eh[0x28..0x30].try_into().ok()?);
    let (shentsize, shnum) = (u16_at(&eh, 0x3A), u16_at(&eh, 0x3C));
    if shentsize < 8 || shnum == 0 || shnum > 4096 {
        return Some(false);
    }
    let mut sh = vec![0u8; (shentsize * shnum) as usize];
    f.seek(SeekFrom::Start(shoff)).ok()?;
    f.read_exact(&mut sh).ok()?;
    Some(sh.chunks(shentsize as usize).any(|s| u32::from_le_bytes([s[4], s[5], s[6], s[7]]) == 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symtab_of_real_files() {
        // The running test binary has symbols; /bin/true on Debian is stripped.
        let me = std::env::current_exe().unwrap();
        assert_eq!(has_symtab(&me), Some(true));
        assert_eq!(has_symtab(Path::new("/nonexistent/x")), None);
        assert_eq!(build_id_path("abcdef").as_deref(), Some("/usr/lib/debug/.build-id/ab/cdef.debug"));
        assert_eq!(build_id_path("zz"), None);
    }
}
