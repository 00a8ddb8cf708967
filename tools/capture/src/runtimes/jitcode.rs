//! Mappings that look like files but hold code a runtime generates:
//! opcache's JIT buffer (`/dev/zero`, a shared anonymous mapping, or
//! `/SYSV...` System V shared memory), BEAM's and .NET's double-mapped
//! code (`/memfd:...`), and memory a runtime named with
//! PR_SET_VMA_ANON_NAME (`[anon:...]`). Taken for files, they were
//! opened and parsed as ELF (nothing found), their frames named
//! `zero+0x...` or `memfd:vmem+0x...` with "build it with -g" as advice,
//! and a stack that started there carried no cut marker. They are
//! anonymous code for the unwinder and the Maps record: walked by frame
//! pointers, named by a perf map when the runtime writes one.

/// Whether the mapping named `path` (as /proc/PID/maps or an MMAP2
/// record names it, " (deleted)" or not) is a runtime's generated code.
pub fn is_jit_mapping(path: &str) -> bool {
    let p = path.strip_suffix(" (deleted)").unwrap_or(path);
    p == "/dev/zero" || p.starts_with("/memfd:") || p.starts_with("/SYSV") || p.starts_with("[anon:") || p.starts_with("/anon_hugepage")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_code_in_file_like_mappings_is_told_from_files() {
        for p in ["/dev/zero (deleted)", "/dev/zero", "/memfd:vmem (deleted)", "/memfd:doublemapper", "[anon:v8]", "/SYSV00000000 (deleted)"] {
            assert!(is_jit_mapping(p), "{p}");
        }
        for p in ["/usr/bin/php8.2", "/usr/lib/x86_64-linux-gnu/libc.so.6", "[vdso]", "/dev/zeros.so", "/tmp/memfd:x.so"] {
            assert!(!is_jit_mapping(p), "{p}");
        }
    }
}
