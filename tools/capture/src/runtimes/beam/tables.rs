//! The BEAM's own tables, found with no symbol: the functions of the
//! loaded modules, from the `ErtsCodeInfo` the JIT puts before each
//! function in its code, and the atom table that names them.
//!
//! - **Functions.** BeamAsm (x86-64) emits before each function a 40-byte
//!   `ErtsCodeInfo`, 8-aligned: an 8-byte field that is code (`call
//!   rel32` to the module's `i_func_info` fragment, then two `nop`s and
//!   the breakpoint flag byte in OTP 26+, a 3-byte `nopl` in OTP 25), the
//!   breakpoint pointer, then the function's MFA: module and function
//!   atoms (immediates tagged `0x0B` in their low 6 bits) and the arity.
//!   The emulator reads the same words to name a function in a crash
//!   (`erts_code_to_codeinfo`). In OTP 26+ the call lands on the module's
//!   dispatch table, after its last function: the module's end.
//! - **Atoms.** `erts_atom_table` is an `IndexTable` whose hash is named
//!   by a string literal, `"atom_tab"` (`htable.name`, 64 bytes in): the
//!   one word in the emulator's data that points at that string is the
//!   table's. Its segments (`seg_table`, 120 bytes in) hold 1024 `Atom`
//!   pointers each; an `Atom` has its byte length at 24 and its text at
//!   32, a `byte *` (OTP 25-28) or, in OTP 29, a boxed heap binary
//!   (tag 2: header, size in bits, then the bytes). Checked: atoms 0 and 1
//!   are `false` and `true` in every OTP.

/// One `ErtsCodeInfo` found in the JIT's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Info {
    /// Its address (the function's code follows it, 40 bytes on).
    pub at: u64,
    /// Atom indexes.
    pub module: u64,
    pub function: u64,
    pub arity: u64,
    /// Where its `call` lands (OTP 26+: its module's dispatch table).
    pub call: u64,
}

/// A function's code: `[start, end)` with its MFA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Func {
    pub start: u64,
    pub end: u64,
    pub module: u64,
    pub function: u64,
    pub arity: u64,
    /// Its end is a bound, not known: the last function of an OTP 25
    /// module (its call gives no end), which runs to the next module's
    /// first function or [`MAX_FUNC`], over code loaded after the read.
    pub open: bool,
}

const ATOM_TAG: u64 = 0x0B;
pub const INFO_SIZE: usize = 40;
/// A function longer than this is not one (the last one of a module
/// whose end the call does not give, OTP 25, ends there at most).
pub const MAX_FUNC: u64 = 1 << 20;

fn word(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The `ErtsCodeInfo`s in `bytes`, the code at `base`.
pub fn code_infos(base: u64, bytes: &[u8]) -> Vec<Info> {
    let mut out = Vec::new();
    let first = (base.wrapping_neg() % 8) as usize;
    let mut i = first;
    while i + INFO_SIZE <= bytes.len() {
        let b = &bytes[i..i + INFO_SIZE];
        let op = b[0] == 0xE8 && (b[5..7] == [0x90, 0x90] && b[7] < 0x10 || b[5..8] == [0x0F, 0x1F, 0x00]);
        if op {
            let (m, f, a) = (word(b, 16).unwrap_or(0), word(b, 24).unwrap_or(0), word(b, 32).unwrap_or(u64::MAX));
            if m & 0x3F == ATOM_TAG && f & 0x3F == ATOM_TAG && a < 256 {
                let at = base + i as u64;
                let rel = i32::from_le_bytes(b[1..5].try_into().unwrap());
                let call = (at + 5).wrapping_add_signed(i64::from(rel));
                out.push(Info { at, module: m >> 6, function: f >> 6, arity: a, call });
                i += INFO_SIZE;
                continue;
            }
        }
        i += 8;
    }
    out
}

/// The functions of `infos` (sorted by address): each ends where the
/// next begins, the last of a module where its call lands when that is
/// after it (the module's dispatch table), else (open) at the next
/// module's first function, and never past [`MAX_FUNC`].
pub fn functions(infos: &[Info]) -> Vec<Func> {
    let mut out = Vec::with_capacity(infos.len());
    for (k, f) in infos.iter().enumerate() {
        let next = infos.get(k + 1);
        let (end, open) = match next {
            Some(n) if n.module == f.module && n.call == f.call => (n.at, false),
            _ if f.call > f.at && f.call - f.at < MAX_FUNC => (next.map_or(f.call, |n| n.at.min(f.call)), false),
            Some(n) => (n.at.min(f.at + MAX_FUNC), true),
            None => (f.at + MAX_FUNC, true),
        };
        out.push(Func { start: f.at, end, module: f.module, function: f.function, arity: f.arity, open });
    }
    out
}

/// `infos` (sorted by address) with `more` put in.
pub fn merge(infos: &mut Vec<Info>, more: &[Info]) {
    infos.extend_from_slice(more);
    infos.sort_by_key(|i| i.at);
    infos.dedup_by_key(|i| i.at);
}

/// The function holding `addr`, in `funcs` sorted by start.
pub fn lookup(funcs: &[Func], addr: u64) -> Option<&Func> {
    let i = funcs.partition_point(|f| f.start <= addr);
    funcs.get(i.checked_sub(1)?).filter(|f| addr < f.end)
}

/// Where the text of an atom is, from its `Atom`'s name word and byte
/// length: a boxed heap binary (OTP 29) when `read` finds its size in
/// bits after its header, else a plain pointer.
pub fn atom_text(name: u64, len: u64, read: impl Fn(u64) -> Option<u64>) -> u64 {
    if name & 3 == 2 && read((name & !3) + 8) == Some(len * 8) {
        (name & !3) + 16
    } else {
        name
    }
}

/// The `erts_atom_table` among the words of the emulator's data that
/// point at its hash's name: `htable.name` is 64 bytes into the table.
pub const ATOM_TABLE_NAME_AT: u64 = 64;
/// `IndexTable.entries` and `.seg_table`.
pub const ATOM_TABLE_ENTRIES_AT: u64 = 116;
pub const ATOM_TABLE_SEGS_AT: u64 = 120;
/// `Atom.len`, `Atom.name`.
pub const ATOM_LEN_AT: u64 = 24;
pub const ATOM_NAME_AT: u64 = 32;
/// Atoms per segment of the table (`INDEX_PAGE_SHIFT`).
pub const ATOM_PAGE_SHIFT: u64 = 10;

/// The 8-aligned offsets in `data` (at `base`) of words equal to `value`.
pub fn words_equal(base: u64, data: &[u8], value: u64) -> Vec<u64> {
    let first = (base.wrapping_neg() % 8) as usize;
    (first..data.len().saturating_sub(7)).step_by(8).filter(|&i| word(data, i) == Some(value)).map(|i| base + i as u64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An OTP 26+ `ErtsCodeInfo`: call, nop, nop, flag; gen_bp; MFA.
    fn info(at: u64, call: u64, m: u64, f: u64, a: u64, otp25: bool) -> Vec<u8> {
        let mut v = vec![0xE8];
        v.extend_from_slice(&((call as i64 - (at as i64 + 5)) as i32).to_le_bytes());
        v.extend_from_slice(if otp25 { &[0x0F, 0x1F, 0x00] } else { &[0x90, 0x90, 0x00] });
        v.extend_from_slice(&0u64.to_le_bytes());
        for w in [m << 6 | ATOM_TAG, f << 6 | ATOM_TAG, a] {
            v.extend_from_slice(&w.to_le_bytes());
        }
        v
    }

    #[test]
    fn functions_of_two_modules_end_at_the_next_and_at_the_dispatch_table() {
        let base = 0x7f00_0000_0000;
        let mut code = vec![0xCCu8; 0x400];
        let put = |code: &mut Vec<u8>, off: usize, b: Vec<u8>| code[off..off + b.len()].copy_from_slice(&b);
        // Module 7: two functions, its dispatch table at 0x180; module 9 after.
        put(&mut code, 0x40, info(base + 0x40, base + 0x180, 7, 100, 0, false));
        put(&mut code, 0xa8, info(base + 0xa8, base + 0x180, 7, 101, 2, false));
        put(&mut code, 0x200, info(base + 0x200, base + 0x300, 9, 102, 1, false));
        // Words that look alike but are not: misaligned, arity too large, not atoms.
        put(&mut code, 0x309, info(base + 0x309, base, 7, 1, 0, false));
        put(&mut code, 0x340, info(base + 0x340, base, 7, 1, 300, false));
        let mut bad = info(base + 0x398, base, 7, 1, 0, false);
        bad[16] = 0x0C;
        put(&mut code, 0x398, bad);
        let infos = code_infos(base, &code);
        assert_eq!(infos.iter().map(|i| i.at - base).collect::<Vec<_>>(), [0x40, 0xa8, 0x200]);
        let funcs = functions(&infos);
        assert_eq!(funcs.iter().map(|f| (f.start - base, f.end - base, f.function, f.open)).collect::<Vec<_>>(), [(0x40, 0xa8, 100, false), (0xa8, 0x180, 101, false), (0x200, 0x300, 102, false)]);
        assert_eq!(lookup(&funcs, base + 0x17f).map(|f| f.arity), Some(2));
        assert_eq!(lookup(&funcs, base + 0x180), None);
        assert_eq!(lookup(&funcs, base + 0x3f), None);
    }

    #[test]
    fn otp25_calls_backwards_so_its_functions_end_at_the_next() {
        let base = 0x7f00_0000_0000;
        let mut code = vec![0u8; 0x200];
        let a = info(base + 0x10, base, 3, 4, 1, true);
        code[0x10..0x10 + a.len()].copy_from_slice(&a);
        let b = info(base + 0x100, base + 0x40, 5, 6, 0, true);
        code[0x100..0x100 + b.len()].copy_from_slice(&b);
        let mut infos = code_infos(base, &code);
        let funcs = functions(&infos);
        assert_eq!(funcs.iter().map(|f| (f.start - base, f.end - base, f.open)).collect::<Vec<_>>(), [(0x10, 0x100, true), (0x100, 0x100 + MAX_FUNC, true)]);
        // A module loaded after the read, past the last function: its
        // code was the last one's, and is its own once its info is put in.
        let c = info(base + 0x400, base + 0x380, 7, 8, 2, true);
        merge(&mut infos, &code_infos(base + 0x400, &c));
        let funcs = functions(&infos);
        assert_eq!(lookup(&funcs, base + 0x450).map(|f| (f.function, f.open)), Some((8, true)));
        assert_eq!(lookup(&funcs, base + 0x3ff).map(|f| (f.start - base, f.end - base)), Some((0x100, 0x400)));
    }

    #[test]
    fn atom_text_boxed_or_plain() {
        // OTP 29's "false": a boxed pointer (tag 2) to [header, 40 bits, bytes].
        let read = |a: u64| (a == 0x1008).then_some(40);
        assert_eq!(atom_text(0x1002, 5, read), 0x1010);
        // A plain byte pointer whose low bits happen to be 2.
        assert_eq!(atom_text(0x2002, 5, read), 0x2002);
        assert_eq!(atom_text(0x1000, 5, read), 0x1000);
        // Only 8-aligned words: 7 at 0x1008, not the one at 0x1011.
        let mut data = [0u8; 24];
        data[4] = 7;
        data[13] = 7;
        assert_eq!(words_equal(0x1004, &data, 7), [0x1008]);
    }
}
