//! Demangling that blazesym left undone, a symbol as frames, and the text
//! of unresolved frames.

use wallclock_stream::Frame;

/// Demangle `name` if it is still mangled: Rust first (legacy `_ZN..17h<hash>E`
/// and v0 `_R`), printed without the hash, then C++ with cpp_demangle.
/// Anything else comes back as it was.
pub fn demangle(name: &str) -> String {
    if !(name.starts_with("_Z") || name.starts_with("__Z") || name.starts_with("_R")) {
        return name.to_string();
    }
    // A C++ name never matches rustc-demangle's grammar (it requires the
    // legacy hash or the v0 prefix), so trying Rust first is safe.
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}");
    }
    if let Ok(sym) = cpp_demangle::Symbol::new(name) {
        if let Ok(d) = sym.demangle() {
            return d;
        }
    }
    name.to_string()
}

/// Last path component of a module path (`/usr/lib/libc.so.6` -> `libc.so.6`).
pub fn basename(path: &str) -> &str {
    let p = path.trim_end_matches(" (deleted)");
    p.rsplit('/').next().filter(|s| !s.is_empty()).unwrap_or(p)
}

/// A module's name in frames: its file name, or, where another file the
/// process mapped has that name too (two packages'
/// `driver.cpython-311-x86_64-linux-gnu.so`), the shortest tail of its
/// path that tells it apart (`p3/driver.cpython-311-x86_64-linux-gnu.so`),
/// which wcreport turns back into the path.
pub fn module_name<'a>(path: &str, maps: impl IntoIterator<Item = &'a str>) -> String {
    let path = path.trim_end_matches(" (deleted)");
    let base = basename(path);
    let others: Vec<&str> = maps.into_iter().map(|p| p.trim_end_matches(" (deleted)")).filter(|p| *p != path && basename(p) == base).collect();
    if others.is_empty() {
        return base.to_string();
    }
    let parts: Vec<&str> = path.split('/').collect();
    for k in 2..parts.len() {
        let tail = parts[parts.len() - k..].join("/");
        if others.iter().all(|o| !o.ends_with(&format!("/{tail}"))) {
            return tail;
        }
    }
    path.to_string()
}

/// `module+0xOFFSET`: an address we could not name, in a module we know.
pub fn module_offset(module: &str, offset: u64) -> String {
    format!("{}+{:#x}", basename(module), offset)
}

/// An address in no known mapping: keep the address visible.
pub fn unknown_addr(addr: u64) -> String {
    format!("[unknown]+{addr:#x}")
}

/// A symbol and the functions inlined into it at that address, outer first.
pub(crate) fn sym_frames(sym: &blazesym::symbolize::Sym, module: Option<&str>, no_demangle: bool, kernel: bool, jit: bool) -> Option<Vec<Frame>> {
    if sym.name.is_empty() {
        return None;
    }
    let name = |n: &str| if no_demangle { n.to_string() } else { demangle(n) };
    let frame = |func: &str, code: Option<&blazesym::symbolize::CodeInfo>, inlined: bool| Frame {
        func: name(func),
        module: module.map(str::to_string),
        file: code.map(|c| c.to_path().display().to_string()),
        line: code.and_then(|c| c.line),
        inlined,
        kernel,
        jit,
    };
    let mut out = vec![frame(&sym.name, sym.code_info.as_deref(), false)];
    for f in sym.inlined.iter() {
        out.push(frame(&f.name, f.code_info.as_ref(), true));
    }
    // Names come from files the target may have written (a perf map, a
    // JIT's ELF image): anything that is not printable text is marked.
    out.iter_mut().for_each(wallclock_stream::names::check_frame);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_cpp_and_rust_and_leaves_plain_names() {
        assert_eq!(demangle("_ZN4wcns4tmplIiEET_S1_"), "int wcns::tmpl<int>(int)");
        assert_eq!(demangle("_ZN3foo3bar17h05af221e174051e9E"), "foo::bar");
        assert_eq!(demangle("main"), "main");
        assert_eq!(demangle("_Znot a symbol"), "_Znot a symbol");
    }

    #[test]
    fn module_names() {
        assert_eq!(basename("/usr/lib/x86_64-linux-gnu/libc.so.6"), "libc.so.6");
        assert_eq!(basename("/tmp/a.out (deleted)"), "a.out");
        assert_eq!(module_offset("/bin/true", 0x1234), "true+0x1234");
        let so = "driver.cpython-311-x86_64-linux-gnu.so";
        let (a, b, c) = (format!("/x/p1/{so}"), format!("/x/p2/{so}"), format!("/y/p1/{so}"));
        assert_eq!(module_name(&a, ["/lib/libc.so.6", a.as_str()]), so);
        assert_eq!(module_name(&a, [a.as_str(), b.as_str()]), format!("p1/{so}"));
        assert_eq!(module_name(&a, [a.as_str(), b.as_str(), c.as_str()]), format!("x/p1/{so}"));
        assert_eq!(unknown_addr(0x7f00), "[unknown]+0x7f00");
    }
}
