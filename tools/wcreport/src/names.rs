//! Time without a name: per module, the time of the stacks whose
//! innermost user frame has no symbol (`module+0x...`), and what to do
//! about it (install the package's debug symbols, or place the debug file
//! where debuggers look).
//!
//! The hint looks at this machine: the file's owning Debian package
//! (dpkg's file lists, as `dpkg-query -S` reads them), whether the file still has a symbol table, and
//! whether a debug file for its build id is already installed. A report
//! read elsewhere than the capture still names the build id's path.

use std::collections::BTreeMap;
use std::path::Path;

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
    /// Time of the stacks holding an unnamed frame of this module at any
    /// depth (a C extension's frames under a named leaf), each stack once.
    pub inside_ns: u64,
    /// What else to do, when the hint alone may fail: the debug archive to
    /// add to apt's sources, what to do where no `-dbgsym` package exists.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
}

/// Modules with unnamed time, most unnamed time first: those of the
/// innermost user frames (`funcs`), and every module in `inside` (time of
/// the stacks holding an unnamed frame of it anywhere: [`inside_time`]).
pub fn unnamed_modules<'a>(
    funcs: impl Iterator<Item = &'a FunctionTime>,
    inside: &BTreeMap<String, u64>,
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
    for m in inside.keys() {
        by.entry(m.clone()).or_default();
    }
    let mut v: Vec<UnnamedModule> = by
        .into_iter()
        .map(|(module, (ns, unnamed_ns))| (inside.get(&module).copied().unwrap_or(0), module, ns, unnamed_ns))
        .filter(|(inside_ns, _, _, un)| *un > 0 || *inside_ns > 0)
        .map(|(inside_ns, module, ns, unnamed_ns)| {
            let build_id = build_ids.get(&module).cloned();
            let (why, hint, package, steps) = advice(&module, build_id.as_deref());
            let pct = if ns > 0 { unnamed_ns as f64 * 100.0 / ns as f64 } else { 0.0 };
            UnnamedModule { module, ns, unnamed_ns, pct, why, hint, inside_ns, steps, package, build_id }
        })
        .collect();
    v.sort_by(|a, b| b.unnamed_ns.max(b.inside_ns).cmp(&a.unnamed_ns.max(a.inside_ns)).then_with(|| a.module.cmp(&b.module)));
    v
}

/// Per module, the time of the stacks holding at least one unnamed user
/// frame of it, at any depth (each stack counted once per module): a
/// module whose unnamed frames are never innermost (a C extension calling
/// a named library) is listed too. `path` turns a frame's module into the
/// file path the report shows (as for the innermost frames).
pub fn inside_time<'a>(
    stacks: impl Iterator<Item = &'a wallclock_stream::Stack>,
    path: impl Fn(u32, &str) -> Option<String>,
) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    let mut seen: Vec<String> = Vec::new();
    for s in stacks {
        seen.clear();
        for f in s.frames.iter().filter(|f| !f.kernel && crate::frames::is_unnamed(f)) {
            let Some(m) = crate::frames::module_of(f) else { continue };
            let m = path(s.pid, &m).unwrap_or(m);
            if !seen.contains(&m) {
                *out.entry(m.clone()).or_default() += s.ns;
                seen.push(m);
            }
        }
    }
    out
}

/// Where gdb, perf and blazesym look for the debug file of a build id.
pub fn build_id_path(id: &str) -> Option<String> {
    (id.len() > 2 && id.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| format!("/usr/lib/debug/.build-id/{}/{}.debug", &id[..2], &id[2..]))
}

type Advice = (String, String, Option<String>, Vec<String>);

fn advice(module: &str, build_id: Option<&str>) -> Advice {
    if module == UNSYMBOLIZED {
        return ("addresses only".into(), "the stream was not symbolized: pipe it through stacksym".into(), None, vec![]);
    }
    if generated(module) {
        return (
            "JIT code".into(),
            "code a runtime generated in memory named like a file (opcache's /dev/zero, BEAM's /memfd:vmem), not a binary to rebuild: see the runtimes lines for what names it".into(),
            None,
            vec![],
        );
    }
    if !module.starts_with('/') && !module.starts_with('[') {
        // A file name the maps records did not turn into one path: two
        // loaded files share it (two packages' `driver.cpython-311-*.so`),
        // or its process's maps were not recorded. Not JIT code.
        return (
            "a loaded file the maps do not tell apart".into(),
            format!("{module} names two or more loaded files (or a process whose maps were not recorded): symbolize with stacksym while the process runs, or install the debug symbols of each file of that name"),
            None,
            vec![],
        );
    }
    if !module.starts_with('/') {
        return (
            "outside every mapped file".into(),
            "JIT code without a perf map (perf-PID.map), or code of a process whose mappings were not read".into(),
            None,
            vec![],
        );
    }
    let debug = build_id.and_then(build_id_path);
    let place = match &debug {
        Some(p) => format!("place the debug file at {p}"),
        None => "place the debug file under /usr/lib/debug/.build-id/".to_string(),
    };
    if let Some(p) = debug.as_deref().filter(|p| Path::new(p).exists()) {
        return ("debug file not used".into(), format!("{p} is installed: symbolize again with stacksym"), None, vec![]);
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
    let steps = match &package {
        Some(pkg) => dbgsym_steps(&debug_package(pkg), build_id, module, debug_archive_in_sources(Path::new("/etc/apt"))),
        None => vec![],
    };
    (why.into(), hint, package, steps)
}

/// Whether `module` is a mapping that holds a runtime's generated code
/// though named like a file (its path, or its file name as frames carry
/// it): opcache's JIT buffer (`/dev/zero`, System V shared memory),
/// BEAM's and .NET's double-mapped code (`/memfd:...`), a named
/// anonymous mapping (`[anon:...]`).
pub fn generated(module: &str) -> bool {
    let m = module.strip_suffix(" (deleted)").unwrap_or(module);
    let base = m.rsplit('/').next().unwrap_or(m);
    m == "/dev/zero" || m == "zero" || base.starts_with("memfd:") || base.starts_with("SYSV") || m.starts_with("[anon:")
}

/// What to do when `apt install PKG` fails: Debian's `-dbgsym` packages
/// are in a separate archive, not in a stock system's sources
/// (`in_sources`: whether apt's sources name it; None: no apt here); and
/// not every package builds one.
fn dbgsym_steps(pkg: &str, build_id: Option<&str>, module: &str, in_sources: Option<bool>) -> Vec<String> {
    let mut steps = Vec::new();
    if in_sources == Some(false) {
        let c = codename();
        steps.push(format!(
            "apt's sources lack Debian's debug archive, where {pkg} is: add `deb http://deb.debian.org/debian-debug/ {c}-debug main` \
             and `deb http://deb.debian.org/debian-debug/ {c}-proposed-updates-debug main` to /etc/apt/sources.list.d/debug.list, \
             then apt update (https://wiki.debian.org/HowToGetABacktrace)"
        ));
    }
    let fetch = match build_id.and_then(|id| build_id_path(id).map(|p| (id, p))) {
        Some((id, p)) => format!(
            "DEBUGINFOD_URLS=https://debuginfod.debian.net debuginfod-find debuginfo {id} (apt install debuginfod) and copy the file it prints to {p}"
        ),
        None => format!(
            "DEBUGINFOD_URLS=https://debuginfod.debian.net debuginfod-find debuginfo {module} (apt install debuginfod) and place the file it prints under /usr/lib/debug/.build-id/"
        ),
    };
    let base = module.rsplit('/').next().unwrap_or(module);
    steps.push(format!(
        "where apt has no {pkg} (not every package builds one): {fetch}; or rebuild it with -g; else its frames stay {base}+0x..."
    ));
    steps
}

/// Does any of apt's sources under `apt_dir` name Debian's debug archive
/// (`debian-debug`)? None when there are no sources (not apt).
fn debug_archive_in_sources(apt_dir: &Path) -> Option<bool> {
    let mut files = vec![apt_dir.join("sources.list")];
    if let Ok(d) = std::fs::read_dir(apt_dir.join("sources.list.d")) {
        files.extend(d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "list" || x == "sources")));
    }
    let texts: Vec<String> = files.iter().filter_map(|f| std::fs::read_to_string(f).ok()).collect();
    if texts.is_empty() {
        return None;
    }
    Some(texts.iter().flat_map(|t| t.lines()).any(|l| !l.trim_start().starts_with('#') && l.contains("debian-debug")))
}

/// This system's Debian codename (`bookworm`), from /etc/os-release.
fn codename() -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| t.lines().find_map(|l| l.strip_prefix("VERSION_CODENAME=").map(|v| v.trim_matches('"').to_string())))
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "bookworm".into())
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
    let owners = dpkg_owners();
    tries.iter().find_map(|p| owners.get(p.as_str()).cloned())
}

/// Every file dpkg installed, and its package, from dpkg's own lists
/// (`/var/lib/dpkg/info/PKG[:ARCH].list`), read once: what `dpkg-query -S`
/// reads, without a process per path tried (four per module, 50 ms
/// each: half a second of every report of a build).
fn dpkg_owners() -> &'static std::collections::HashMap<String, String> {
    static OWNERS: std::sync::OnceLock<std::collections::HashMap<String, String>> = std::sync::OnceLock::new();
    OWNERS.get_or_init(|| {
        let mut owners = std::collections::HashMap::new();
        let Ok(dir) = std::fs::read_dir("/var/lib/dpkg/info") else { return owners };
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pkg) = name.strip_suffix(".list") else { continue };
            let pkg = pkg.split(':').next().unwrap_or(pkg).to_string();
            let Ok(text) = std::fs::read_to_string(e.path()) else { continue };
            for line in text.lines().filter(|l| l.starts_with('/')) {
                owners.entry(line.to_string()).or_insert_with(|| pkg.clone());
            }
        }
        owners
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

    #[test]
    fn jit_code_in_file_like_mappings_is_never_a_binary_to_rebuild() {
        for m in ["/dev/zero", "zero", "/memfd:vmem", "memfd:doublemapper (deleted)", "[anon:v8]", "/SYSV00000000"] {
            let (why, hint, pkg, _) = advice(m, None);
            assert_eq!(why, "JIT code", "{m}");
            assert!(!hint.contains("-g") && pkg.is_none(), "{m}: {hint}");
        }
        assert!(!generated("/usr/bin/zero") && !generated("/usr/lib/libzero.so"));
        // A file name two loaded files share is no code outside the files.
        let (why, _, _, _) = advice("driver.cpython-311-x86_64-linux-gnu.so", None);
        assert!(!why.contains("outside every mapped file"), "{why}");
        assert_eq!(advice("[unknown]", None).0, "outside every mapped file");
    }

    /// The debug archive is named only when apt's sources lack it; where
    /// no -dbgsym package exists, debuginfod, -g, or module+0x... .
    #[test]
    fn dbgsym_advice_says_what_apt_needs() {
        let d = std::env::temp_dir().join(format!("wcreport-apt-{}", std::process::id()));
        std::fs::create_dir_all(d.join("sources.list.d")).unwrap();
        std::fs::write(d.join("sources.list.d/debian.sources"), "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n").unwrap();
        std::fs::write(d.join("sources.list.d/old.list"), "# deb http://deb.debian.org/debian-debug/ bookworm-debug main\n").unwrap();
        assert_eq!(debug_archive_in_sources(&d), Some(false));
        std::fs::write(d.join("sources.list.d/debug.list"), "deb http://deb.debian.org/debian-debug/ bookworm-debug main\n").unwrap();
        assert_eq!(debug_archive_in_sources(&d), Some(true));
        std::fs::remove_dir_all(&d).unwrap();
        assert_eq!(debug_archive_in_sources(Path::new("/nonexistent/apt")), None);

        let steps = dbgsym_steps("nginx-dbgsym", Some("abcdef12"), "/usr/sbin/nginx", Some(false));
        assert_eq!(steps.len(), 2, "{steps:?}");
        assert!(steps[0].contains("deb http://deb.debian.org/debian-debug/ ") && steps[0].contains("-proposed-updates-debug main"), "{steps:?}");
        assert!(steps[1].contains("where apt has no nginx-dbgsym"), "{steps:?}");
        assert!(steps[1].contains("debuginfod-find debuginfo abcdef12") && steps[1].contains("/usr/lib/debug/.build-id/ab/cdef12.debug"));
        assert!(steps[1].ends_with("else its frames stay nginx+0x..."), "{steps:?}");
        assert_eq!(dbgsym_steps("x-dbgsym", None, "/usr/bin/x", Some(true)).len(), 1, "the archive is there: not told");
    }
}
