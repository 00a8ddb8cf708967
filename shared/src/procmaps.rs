//! The one `/proc/PID/maps` parser: stacksym names frames with it, the
//! capture tools record each process's mappings and find CPython's
//! interpreter with it, and the CUPTI injection library lists the
//! program's own mappings and site-packages with it.

use crate::record::MapEntry;

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcMap {
    /// Range, file offset and path (empty for an anonymous mapping; as the
    /// kernel writes it, ` (deleted)` included).
    pub entry: MapEntry,
    /// `rwxp` permissions.
    pub perms: String,
}

impl ProcMap {
    pub fn executable(&self) -> bool {
        self.perms.contains('x')
    }
}

/// `start-end perms offset dev inode [path]`, hex numbers; `None` for a
/// line that is not one.
pub fn parse_line(line: &str) -> Option<ProcMap> {
    let mut it = line.splitn(6, ' ');
    let (s, e) = it.next()?.split_once('-')?;
    let perms = it.next()?.to_string();
    let offset = u64::from_str_radix(it.next()?, 16).ok()?;
    let _dev = it.next()?;
    let _inode = it.next()?;
    let path = it.next().unwrap_or("").trim().to_string();
    let entry = MapEntry {
        start: u64::from_str_radix(s, 16).ok()?,
        end: u64::from_str_radix(e, 16).ok()?,
        offset,
        path,
        build_id: None,
    };
    Some(ProcMap { entry, perms })
}

/// Every mapping of `pid`, or `None` when the process is gone or unreadable.
pub fn read(pid: u32) -> Option<Vec<ProcMap>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    Some(text.lines().filter_map(parse_line).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let m = parse_line("55d4a0e00000-55d4a0e2c000 r-xp 00004000 fd:01 1234    /usr/bin/my prog (deleted)").unwrap();
        assert_eq!((m.entry.start, m.entry.end, m.entry.offset), (0x55d4a0e00000, 0x55d4a0e2c000, 0x4000));
        assert_eq!(m.entry.path, "/usr/bin/my prog (deleted)");
        assert!(m.executable());
        let anon = parse_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!(anon.entry.path, "");
        assert!(!anon.executable());
        assert!(parse_line("garbage").is_none());
        assert!(read(std::process::id()).unwrap().iter().any(|m| m.executable() && m.entry.path.starts_with('/')));
    }
}
