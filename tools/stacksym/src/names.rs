//! Demangling that blazesym left undone, and the text of unresolved frames.

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

/// `module+0xOFFSET`: an address we could not name, in a module we know.
pub fn module_offset(module: &str, offset: u64) -> String {
    format!("{}+{:#x}", basename(module), offset)
}

/// An address in no known mapping: keep the address visible.
pub fn unknown_addr(addr: u64) -> String {
    format!("[unknown]+{addr:#x}")
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
        assert_eq!(unknown_addr(0x7f00), "[unknown]+0x7f00");
    }
}
