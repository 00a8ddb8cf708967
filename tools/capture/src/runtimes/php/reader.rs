//! PHP's executor (8.2 to 8.5), read from outside the process
//! (process_vm_readv): `executor_globals` (exported by the `php8.N`
//! executable of an NTS build, as Debian ships it; a thread-safe build's
//! are per thread, found from its TLS: [`Zts`]) ->
//! `current_execute_data` -> the chain of `zend_execute_data`, each naming
//! its function (`zend_function`: type, name, class), file (a user
//! function's `op_array.filename`) and line (its `opline`'s `lineno`).
//!
//! The offsets are PHP 8.2's, from the headers of Debian's `php8.2-dev`
//! (8.2.36-1~deb12u1), 8.3's, from Ubuntu 24.04's `php8.3-dev` (8.3.6),
//! 8.4's, from Debian forky's `php8.4-dev` (8.4.27-1), and 8.5's, from
//! Debian experimental's `php8.5-dev` (8.5.7-1): `offsetof` of each
//! field, printed by a C program built
//! against them (the binaries carry no DWARF). They hold for every
//! release of a minor version (the structs do not change within one) on
//! x86-64. What moved is in [`LAYOUTS`]: `op_array.filename` (152, 144
//! in 8.3, 168 in 8.4: `zend_op_array` changed) and
//! `current_execute_data` (488 -> 512 in 8.5: `zend_executor_globals`
//! grew); other minor versions are not read.

use std::collections::HashMap;

use object::{Object, ObjectSegment, ObjectSymbol};

/// `zend_execute_data`: `opline`, `func`, `This.u1.type_info` (its high
/// half: the call-info flags), `prev_execute_data`.
pub const EX_OPLINE: u64 = 0;
pub const EX_FUNC: u64 = 24;
pub const EX_CALL_INFO_HI: u64 = 42;
pub const EX_PREV: u64 = 48;
/// `ZEND_CALL_TOP >> 16`: a frame called from C (`zend_execute`,
/// `zend_call_function`), the outermost of what one `execute_ex` runs.
pub const CALL_TOP: u32 = 1 << 1;
/// `zend_function`: `type`, `common.function_name`, `common.scope`,
/// `op_array.filename`; `zend_class_entry.name`; `zend_string.len` and
/// `.val`; `zend_op.lineno`.
const FN_TYPE: u64 = 0;
const FN_NAME: u64 = 8;
const FN_SCOPE: u64 = 16;
/// What moves between the minor versions read (8.N): the offsets of
/// `zend_executor_globals.current_execute_data` and `op_array.filename`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub minor: u32,
    pub current_execute_data: u64,
    pub filename: u64,
}

/// The versions read, each with its layout.
const LAYOUTS: [Layout; 4] = [
    Layout { minor: 2, current_execute_data: 488, filename: 152 },
    Layout { minor: 3, current_execute_data: 488, filename: 144 },
    Layout { minor: 4, current_execute_data: 488, filename: 168 },
    Layout { minor: 5, current_execute_data: 512, filename: 168 },
];

fn layout(minor: u32) -> Option<Layout> {
    LAYOUTS.iter().find(|l| l.minor == minor).copied()
}

/// The PHP versions read (`8.N`), those of the table above: what the
/// stream's header says (`runtime_versions`) and the capture's warnings.
pub fn versions() -> Vec<String> {
    LAYOUTS.iter().map(|l| format!("8.{}", l.minor)).collect()
}

/// The versions read, as the capture says them (`PHP 8.2-8.5`).
pub fn read_said() -> String {
    format!("PHP {}", wallclock_stream::versions_said(&versions()))
}
const CE_NAME: u64 = 8;
const STR_LEN: u64 = 16;
const STR_VAL: u64 = 24;
const OP_LINENO: u64 = 24;
/// `ZEND_USER_FUNCTION`, `ZEND_INTERNAL_FUNCTION`.
const USER_FUNCTION: u8 = 2;
const INTERNAL_FUNCTION: u8 = 1;

const MAX_STR: u64 = 1024;

/// What names one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhpFunc {
    /// `Class::method`, `function`, or `{main}` (a script's own code).
    pub name: String,
    /// The script file, for user code.
    pub file: Option<String>,
    /// Internal (C) functions have a native frame of their own (`zif_...`).
    pub internal: bool,
}

/// The PHP executor of a live process.
pub struct Executor {
    pid: u32,
    /// Its version's layout.
    pub layout: Layout,
    /// `&executor_globals` in the process (an NTS build's; 0 for ZTS).
    pub globals: u64,
    /// A ZTS build's per-thread globals.
    pub zts: Option<Zts>,
    /// Where `execute_ex` lies: the native frames that run PHP frames.
    pub execute_ex: Vec<(u64, u64)>,
    /// The mappings of the executable.
    pub mapped: Vec<(u64, u64)>,
    /// Function -> its name, read once per turn of the capture loop (a
    /// closure freed and another made at its address reads anew).
    funcs: HashMap<u64, (u64, PhpFunc)>,
}

/// A thread-safe (ZTS) build's executor globals, one set per thread: at
/// `globals_offset` into the thread's TSRM block, which the word at
/// `tpoff` from the thread pointer (`_tsrm_ls_cache`, in the executable's
/// static TLS) points to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Zts {
    pub tpoff: u64,
    pub globals_offset: u64,
}

/// The minor version of the PHP 8 executable `path` names (Debian's
/// `php8.N`; the `php-cgi8.N` and `php-fpm8.N` SAPIs build the same
/// executor in), read or not.
pub fn php8_minor(path: &str) -> Option<u32> {
    let name = path.rsplit('/').next().unwrap_or("");
    if !name.starts_with("php") || name.contains(".so") {
        return None;
    }
    let (_, v) = name.rsplit_once("8.")?;
    v.parse().ok().filter(|_| !v.is_empty() && v.len() <= 2)
}

/// Whether `path` names a PHP executable whose executor is read: a
/// `php8.N` of a version read, or a PHP built from source (`php`,
/// `php-fpm`, `php-cgi`: the official Docker images', a ZTS build's),
/// whose version its module API number says.
pub fn is_read(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or("");
    match php8_minor(path) {
        Some(m) => layout(m).is_some(),
        None => ["php", "php-fpm", "php-cgi"].contains(&name),
    }
}

/// PHP 8's minor version from its module API number (`ZEND_MODULE_API_NO`):
/// 8.2's 20220829 to 8.5's 20250925.
fn minor_of_api(api: u32) -> Option<u32> {
    [(20220829, 2), (20230831, 3), (20240924, 4), (20250925, 5)].iter().find(|a| a.0 == api).map(|a| a.1)
}

/// The module API number and thread safety a PHP executable was built
/// with, from its build id (`ZEND_MODULE_BUILD_ID`, `API20220829,TS`:
/// in every build, stripped or not).
fn build_id(data: &[u8]) -> Option<(u32, bool)> {
    let mut from = 0;
    while let Some(i) = data[from..].windows(3).position(|w| w == b"API").map(|i| from + i) {
        from = i + 3;
        let digits = data.get(i + 3..i + 11)?;
        if !digits.iter().all(u8::is_ascii_digit) {
            continue;
        }
        let api = std::str::from_utf8(digits).ok()?.parse().ok()?;
        match data.get(i + 11..i + 15) {
            Some(b",TS\0") => return Some((api, true)),
            Some(b",NTS") => return Some((api, false)),
            _ => {}
        }
    }
    None
}

/// Where `_tsrm_ls_cache` lies from the thread pointer (x86-64): what the
/// exported `tsrm_get_ls_cache_tcb_offset` returns (`mov $imm32,%rax`,
/// or its GOT slot's value, `mov slot(%rip),%rax`, read live), else its
/// symbol's offset in the TLS block less the block's aligned size (the
/// executable's block ends at the thread pointer).
fn tsrm_tpoff(data: &[u8], obj: &object::File, mem: &crate::procmem::Mem, bias: u64, tcb_offset: Option<u64>, sym: Option<u64>) -> Option<u64> {
    if cfg!(not(target_arch = "x86_64")) {
        return None;
    }
    if let Some(f) = tcb_offset {
        match *crate::elf::code_at(obj, f, 8)? {
            [0x48, 0xc7, 0xc0, a, b, e, g, 0xc3] => return Some(i64::from(i32::from_le_bytes([a, b, e, g])) as u64),
            [0x48, 0x8b, 0x05, a, b, e, g, _] => {
                let slot = (f + 7).wrapping_add_signed(i64::from(i32::from_le_bytes([a, b, e, g])));
                return mem.u64(slot.wrapping_add(bias)).ok();
            }
            _ => {}
        }
    }
    use object::read::elf::{FileHeader, ProgramHeader};
    let e = object::LittleEndian;
    let hdr = object::elf::FileHeader64::<object::LittleEndian>::parse(data).ok()?;
    let tls = hdr.program_headers(e, data).ok()?.iter().find(|p| p.p_type(e) == object::elf::PT_TLS)?;
    let align = tls.p_align(e).max(1);
    Some(sym?.wrapping_sub(tls.p_memsz(e).div_ceil(align) * align))
}

impl Executor {
    /// The executor of `pid`: its PHP executable's `executor_globals`
    /// (NTS), or where each thread's are (ZTS: `_tsrm_ls_cache` and
    /// `executor_globals_offset`).
    pub fn find(pid: u32) -> Result<Executor, String> {
        let maps = wallclock_stream::procmaps::read(pid).ok_or_else(|| format!("pid {pid}: its maps cannot be read"))?;
        let mine: Vec<_> = maps.into_iter().map(|m| m.entry).filter(|m| is_read(&m.path)).collect();
        let first = mine.first().ok_or_else(|| format!("pid {pid}: no {} executable mapped", read_said()))?;
        let path = first.path.clone();
        // Through the process's own root first (a container's file).
        let data = crate::elf::map_file(&format!("/proc/{pid}/root{path}"))
            .or_else(|| crate::elf::map_file(&path))
            .ok_or_else(|| format!("{path}: cannot map it"))?;
        let obj = object::File::parse(&*data).map_err(|e| format!("{path}: {e}"))?;
        let segments: Vec<(u64, u64, u64)> = obj.segments().map(|s| (s.file_range().0, s.address(), s.file_range().1)).collect();
        let bias = crate::elf::load_bias(&segments, first.start, first.offset).ok_or_else(|| format!("{path}: no segment holds {:#x}", first.offset))?;
        let (mut globals, mut execute_ex, mut tls_sym, mut tcb_offset, mut globals_offset) = (None, Vec::new(), None, None, None);
        for s in obj.dynamic_symbols().chain(obj.symbols()) {
            match s.name_bytes() {
                Ok(b"executor_globals") => _ = globals.get_or_insert(s.address().wrapping_add(bias)),
                Ok(b"execute_ex") => execute_ex.push((s.address().wrapping_add(bias), s.address().wrapping_add(bias) + s.size().max(1))),
                Ok(b"_tsrm_ls_cache") => tls_sym = Some(s.address()),
                Ok(b"tsrm_get_ls_cache_tcb_offset") => tcb_offset = Some(s.address()),
                Ok(b"executor_globals_offset") => globals_offset = Some(s.address().wrapping_add(bias)),
                _ => {}
            }
        }
        let mem = crate::procmem::Mem { pid };
        // The version: the executable's name (Debian's `php8.N`), else
        // its build id (a `php` built from source), which also says
        // whether a build without `executor_globals` is thread-safe (a
        // scan of the file: only where needed).
        let id = if php8_minor(&path).is_none() || globals.is_none() { build_id(&data) } else { None };
        let minor = match php8_minor(&path) {
            Some(m) => m,
            None => {
                let (api, _) = id.ok_or_else(|| format!("{path}: no build id (API...,TS) to tell its version by"))?;
                minor_of_api(api).ok_or_else(|| format!("{path}: module API {api}, not {}'s", read_said()))?
            }
        };
        let layout = layout(minor).ok_or_else(|| format!("{path}: PHP 8.{minor} is not read"))?;
        // A ZTS build keeps its globals per thread: their offset in each
        // thread's TSRM block is set at startup (read live).
        let zts = match (globals, id) {
            (Some(_), _) => None,
            (None, Some((_, true))) => {
                let tpoff = tsrm_tpoff(&data, &obj, &mem, bias, tcb_offset, tls_sym).ok_or_else(|| format!("{path}: a ZTS build, _tsrm_ls_cache not found"))?;
                let at = globals_offset.ok_or_else(|| format!("{path}: a ZTS build with no executor_globals_offset"))?;
                let globals_offset = mem.u64(at)?;
                if globals_offset == 0 {
                    return Err(format!("pid {pid}: executor_globals_offset not set yet"));
                }
                Some(Zts { tpoff, globals_offset })
            }
            _ => return Err(format!("{path}: no executor_globals symbol")),
        };
        execute_ex.sort_unstable();
        execute_ex.dedup();
        let mapped = mine.iter().filter(|m| m.path == path).map(|m| (m.start, m.end)).collect();
        Ok(Executor { pid, layout, globals: globals.unwrap_or(0), zts, execute_ex, mapped, funcs: HashMap::new() })
    }

    /// A new turn of the capture loop: functions are read again.
    pub fn new_turn(&mut self) {
        self.funcs.clear();
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), String> {
        crate::procmem::Mem { pid: self.pid }.read(addr, buf)
    }

    fn u64(&self, addr: u64) -> Result<u64, String> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// A `zend_string`'s text (bytes that are not UTF-8 replaced).
    fn string(&self, s: u64) -> Result<String, String> {
        if s == 0 {
            return Err("no string".into());
        }
        let len = self.u64(s + STR_LEN)?;
        if len > MAX_STR {
            return Err(format!("pid {}: a string of {len} bytes at {s:#x}", self.pid));
        }
        let mut b = vec![0u8; len as usize];
        self.read(s + STR_VAL, &mut b)?;
        Ok(String::from_utf8_lossy(&b).into_owned())
    }

    /// What names function `func` (a `zend_function *`).
    pub fn func(&mut self, func: u64) -> Result<PhpFunc, String> {
        let mut head = [0u8; 24];
        self.read(func, &mut head)?;
        let word = |o: u64| u64::from_le_bytes(head[o as usize..o as usize + 8].try_into().unwrap());
        let (ty, name, scope) = (head[FN_TYPE as usize], word(FN_NAME), word(FN_SCOPE));
        if let Some((_, f)) = self.funcs.get(&func).filter(|(n, _)| *n == name) {
            return Ok(f.clone());
        }
        if ty != USER_FUNCTION && ty != INTERNAL_FUNCTION {
            return Err(format!("pid {}: {func:#x} is no function (type {ty})", self.pid));
        }
        // A script's own code has no name: PHP's traces call it {main}.
        let mut text = if name == 0 { "{main}".to_string() } else { self.string(name)? };
        if scope != 0 {
            let class = self.string(self.u64(scope + CE_NAME)?)?;
            text = format!("{class}::{text}");
        }
        let file = if ty == USER_FUNCTION { self.string(self.u64(func + self.layout.filename)?).ok() } else { None };
        let f = PhpFunc { name: text, file, internal: ty == INTERNAL_FUNCTION };
        self.funcs.insert(func, (name, f.clone()));
        Ok(f)
    }

    /// The line of `opline` (a `zend_op *` of a user function).
    pub fn line(&self, opline: u64) -> Option<u32> {
        if opline == 0 {
            return None;
        }
        let mut b = [0u8; 4];
        self.read(opline + OP_LINENO, &mut b).ok()?;
        Some(u32::from_le_bytes(b)).filter(|&l| l > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_executable_names() {
        assert_eq!(php8_minor("/usr/bin/php8.2"), Some(2));
        assert_eq!(php8_minor("/usr/sbin/php-fpm8.4"), Some(4));
        assert_eq!(php8_minor("/usr/bin/php-cgi8.3"), Some(3));
        assert_eq!(php8_minor("/usr/lib/apache2/modules/libphp8.2.so"), None);
        assert_eq!(php8_minor("/usr/bin/phpize"), None);
        assert!(["/usr/bin/php8.2", "/usr/bin/php8.3", "/usr/bin/php8.4", "/usr/bin/php8.5"].iter().all(|p| is_read(p)) && !is_read("/usr/bin/php8.1") && !is_read("/usr/bin/php8.6"));
        // Built from source: looked at, the version from the build id.
        assert!(is_read("/usr/local/bin/php") && is_read("/usr/local/sbin/php-fpm") && !is_read("/usr/bin/phpize") && !is_read("/usr/bin/phpdbg"));
    }

    #[test]
    fn version_and_thread_safety_from_the_build_id() {
        assert_eq!(build_id(b"\0API\0API2022\0Zend Engine API20220829,TS\0more"), Some((20220829, true)));
        assert_eq!(build_id(b"xxAPI20240924,NTS\0"), Some((20240924, false)));
        assert_eq!(build_id(b"API20240924,NTX API2023083"), None);
        assert_eq!(minor_of_api(20220829), Some(2));
        assert_eq!(minor_of_api(20250925), Some(5));
        assert_eq!(minor_of_api(20210902), None);
    }

    /// The versions said to be read are those with a layout.
    #[test]
    fn the_versions_read_are_those_said() {
        for m in 0..20 {
            assert_eq!(layout(m).is_some(), versions().contains(&format!("8.{m}")), "PHP 8.{m}");
        }
        assert_eq!(read_said(), "PHP 8.2-8.5");
    }
}
