//! The kernel's names for the BPF programs loaded while the capture runs
//! (its own among them), written into the stream as a `ksyms` record
//! (wallclock-stream(5)). A JIT-ed program is in `/proc/kallsyms` only
//! while it is loaded: stacksym reads kallsyms after the capture has
//! exited and unloaded its programs, and named their frames after
//! whatever kernel symbol came before them (`__stop_runtime_ptr_USER_PTR_MAX`).
//! kallsyms is read once after the programs are attached, on a thread of
//! its own (5 MB written slowly by the kernel: the capture does not wait
//! for it), and again at the stop only if a program was loaded since.

use std::collections::HashMap;
use std::sync::Mutex;
use std::thread::JoinHandle;

use libbpf_rs::query::{ProgInfoIter, ProgInfoQueryOptions};
use wallclock_stream::{Ksym, Ksyms, Record, BPF_MODULE};

/// A symbol with no length from the kernel and nothing after it to bound
/// it covers this much (stacksym's bound for the last code of a module).
const LAST_EXTENT: u64 = 4096;

/// The programs' ids and what kallsyms said of them.
type Read = (Vec<u32>, Ksyms);

enum State {
    Idle,
    Reading(JoinHandle<Read>),
    Read(Read),
}

static STATE: Mutex<State> = Mutex::new(State::Idle);

/// Start reading, once the capture's programs are loaded.
pub fn at_attach() {
    if let Ok(t) = std::thread::Builder::new().name("bpfsyms".into()).spawn(read) {
        *STATE.lock().unwrap_or_else(|e| e.into_inner()) = State::Reading(t);
    }
}

/// The attach-time read, waited for where `wait`, else if done.
fn settle(state: &mut State, wait: bool) {
    if matches!(state, State::Reading(t) if wait || t.is_finished()) {
        let State::Reading(t) = std::mem::replace(state, State::Idle) else { unreachable!() };
        if let Ok(r) = t.join() {
            *state = State::Read(r);
        }
    }
}

/// Finish reading while the programs are still loaded: the attach-time
/// read, and a second one where programs were loaded since.
pub fn at_stop() {
    let mut state = STATE.lock().unwrap_or_else(|e| e.into_inner());
    settle(&mut state, true);
    let State::Read((ids, syms)) = &mut *state else { return };
    let now: Vec<u32> = ProgInfoIter::default().map(|p| p.id).collect();
    if now.iter().any(|id| !ids.contains(id)) {
        let (_, later) = read();
        syms.merge(later);
        *ids = now;
    }
}

/// The `ksyms` record, if any program was seen (so far: a window of
/// `--every` closed before the stop has the attach-time read).
pub fn record() -> Option<Record> {
    let mut state = STATE.lock().unwrap_or_else(|e| e.into_inner());
    settle(&mut state, false);
    match &*state {
        State::Read((_, k)) if !k.syms.is_empty() => Some(Record::Ksyms(k.clone())),
        _ => None,
    }
}

/// The loaded programs' ids and their functions' kallsyms entries.
fn read() -> Read {
    let opts = ProgInfoQueryOptions::default().include_jited_ksyms(true).include_jited_func_lens(true);
    let mut ids = Vec::new();
    let mut lens = HashMap::new();
    for p in ProgInfoIter::with_query_opts(opts) {
        ids.push(p.id);
        for (&a, &l) in p.jited_ksyms.iter().zip(&p.jited_func_lens) {
            lens.insert(a as u64, u64::from(l));
        }
    }
    let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    (ids, parse(&text, &lens))
}

/// The `[bpf]` symbols of kallsyms text, each as long as the kernel says
/// its function is (`lens`, by address), else up to the next symbol of
/// the modules' area (programs, trampolines, modules: all above the
/// kernel image).
fn parse(text: &str, lens: &HashMap<u64, u64>) -> Ksyms {
    let mut module_area: Vec<(u64, Option<&str>)> = Vec::new();
    for line in text.lines() {
        let mut it = line.split_ascii_whitespace();
        let (Some(addr), Some(_), Some(name), Some(module)) = (it.next(), it.next(), it.next(), it.next()) else { continue };
        let Ok(addr) = u64::from_str_radix(addr, 16) else { continue };
        if addr != 0 {
            module_area.push((addr, (module == BPF_MODULE).then_some(name)));
        }
    }
    module_area.sort_unstable_by_key(|&(a, _)| a);
    let mut syms = Vec::new();
    for (i, &(addr, name)) in module_area.iter().enumerate() {
        let Some(name) = name else { continue };
        let next = module_area[i + 1..].iter().map(|&(a, _)| a).find(|&a| a > addr);
        let bound = next.map_or(LAST_EXTENT, |n| n - addr);
        let len = lens.get(&addr).map_or(bound, |&l| l.min(bound));
        syms.push(Ksym { addr, len, name: name.to_string() });
    }
    Ksyms { module: BPF_MODULE.into(), syms }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bpf_symbols_bounded_by_their_length_or_the_next_symbol() {
        let text = "ffffffff81000000 T _stext\n\
                    ffffffffc0000900 t bpf_prog_bbbbbbbbbbbbbbbb_second\t[bpf]\n\
                    ffffffffc0000000 t bpf_prog_aaaaaaaaaaaaaaaa_first\t[bpf]\n\
                    ffffffffc0201000 t ftrace_trampoline\t[__builtin__ftrace]\n\
                    ffffffffc0300000 t bpf_trampoline_6442\t[bpf]\n\
                    0000000000000000 t bpf_prog_hidden_x\t[bpf]\n";
        let lens = HashMap::from([(0xffffffffc0000000, 0x120)]);
        let k = parse(text, &lens);
        let got: Vec<(u64, u64, &str)> = k.syms.iter().map(|s| (s.addr, s.len, &*s.name)).collect();
        assert_eq!(
            got,
            [
                (0xffffffffc0000000, 0x120, "bpf_prog_aaaaaaaaaaaaaaaa_first"),
                (0xffffffffc0000900, 0xffffffffc0201000 - 0xffffffffc0000900, "bpf_prog_bbbbbbbbbbbbbbbb_second"),
                (0xffffffffc0300000, LAST_EXTENT, "bpf_trampoline_6442"),
            ]
        );
    }

    /// This process loads no program: whatever is listed is another's,
    /// and every listed one is in kallsyms' `[bpf]` part now.
    #[test]
    fn reads_what_is_loaded() {
        let (_, k) = read();
        let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
        for s in &k.syms {
            assert!(text.contains(&format!("{:016x} ", s.addr)), "{s:?}");
            assert!(s.len > 0);
        }
    }
}
