//! The ground-truth workload (tests/programs/capture/workload.c, which
//! measures its own per-function CPU and wall time) and the stream
//! readers its tests share: tests/capture.rs and tests/kernels.rs (the
//! kernel matrix).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

/// The workload, built once with frame pointers (libc still has none).
pub fn workload() -> PathBuf {
    static W: OnceLock<PathBuf> = OnceLock::new();
    W.get_or_init(|| {
        super::build_c("tests/programs/capture/workload.c", &super::root().join("target/test-tmp/capture-bin"), "workload")
    })
    .clone()
}

pub fn records(path: &Path) -> Vec<Value> {
    let s = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    s.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:.200}: {e}"))).collect()
}

pub fn of_type<'a>(recs: &'a [Value], t: &str) -> Vec<&'a Value> {
    recs.iter().filter(|r| r["type"] == t).collect()
}

pub fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Symbols of the workload, resolved through the stream's Maps record the
/// way stacksym does after the process exited: address -> file offset ->
/// ELF virtual address -> `nm` symbol.
pub struct Syms {
    maps: Vec<(u64, u64, u64)>, // start, end, offset of the workload's mappings
    loads: Vec<(u64, u64, u64)>, // p_offset, p_vaddr, p_filesz
    syms: Vec<(u64, u64, String)>,
}

impl Syms {
    pub fn new(recs: &[Value], bin: &Path) -> Syms {
        let path = bin.to_str().unwrap();
        let mut maps = Vec::new();
        for m in of_type(recs, "maps") {
            for e in m["maps"].as_array().unwrap() {
                if e["path"] == path {
                    maps.push((u(&e["start"]), u(&e["end"]), u(&e["offset"])));
                }
            }
        }
        assert!(!maps.is_empty(), "no Maps record for {path}");
        let re = Command::new("readelf").args(["-lW"]).arg(bin).output().unwrap();
        let mut loads = Vec::new();
        for l in String::from_utf8_lossy(&re.stdout).lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.first() == Some(&"LOAD") {
                let h = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
                loads.push((h(f[1]), h(f[2]), h(f[4])));
            }
        }
        let nm = Command::new("nm").args(["-S", "--defined-only"]).arg(bin).output().unwrap();
        let mut syms = Vec::new();
        for l in String::from_utf8_lossy(&nm.stdout).lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() == 4 && matches!(f[2], "t" | "T") {
                let h = |s: &str| u64::from_str_radix(s, 16).unwrap();
                syms.push((h(f[0]), h(f[1]), f[3].to_string()));
            }
        }
        Syms { maps, loads, syms }
    }

    pub fn name(&self, addr: u64) -> Option<&str> {
        let &(start, _, off) = self.maps.iter().find(|m| addr >= m.0 && addr < m.1)?;
        let foff = addr - start + off;
        let &(po, pv, _) = self.loads.iter().find(|l| foff >= l.0 && foff < l.0 + l.2)?;
        let va = foff - po + pv;
        self.syms.iter().find(|s| va >= s.0 && va < s.0 + s.1.max(1)).map(|s| s.2.as_str())
    }

    /// Workload functions of a user stack, root first (return addresses
    /// looked up at addr-1).
    pub fn funcs(&self, ustack: &[Value]) -> Vec<String> {
        let n = ustack.len();
        ustack
            .iter()
            .enumerate()
            .filter_map(|(i, a)| {
                let a = u(a);
                self.name(if i + 1 == n { a } else { a - 1 }).map(str::to_string)
            })
            .collect()
    }
}

/// The workload's own figures: thread name -> (tid, life ns, func -> (cpu, wall)).
pub type Funcs = HashMap<String, (u64, u64)>;

pub struct Truth {
    pub threads: HashMap<String, (u64, u64, Funcs)>,
}

pub fn truth(stdout: &[u8]) -> Truth {
    let v: Value = serde_json::from_slice(stdout).expect("workload JSON");
    let mut threads = HashMap::new();
    for t in v["threads"].as_array().unwrap() {
        let funcs = t["funcs"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, f)| (k.clone(), (u(&f["cpu_ns"]), u(&f["wall_ns"]))))
            .collect();
        threads.insert(t["name"].as_str().unwrap().to_string(), (u(&t["tid"]), u(&t["end_ns"]) - u(&t["start_ns"]), funcs));
    }
    Truth { threads }
}

pub fn tool(name: &str) -> Command {
    Command::new(super::bin(name))
}

pub fn thread_rec(recs: &[Value], tid: u64) -> &Value {
    of_type(recs, "thread").into_iter().find(|t| u(&t["tid"]) == tid).unwrap_or_else(|| panic!("no thread {tid}"))
}

pub fn stacks_of(recs: &[Value], tid: u64) -> Vec<&Value> {
    of_type(recs, "stack").into_iter().filter(|s| u(&s["tid"]) == tid).collect()
}

pub fn ustack(s: &Value) -> Vec<Value> {
    s["ustack"].as_array().cloned().unwrap_or_default()
}

/// Whole stacks: at least `min` of a stream's time (on-CPU for oncputime,
/// off-CPU for offcputime) is in stacks that reach a thread's first frame
/// (`_start`, or glibc's `clone3`).
pub fn assert_rooted(stream: &Path, min: f64) {
    let folded = super::ok("stackmerge", &["--folded", "--unit", "ns", stream.to_str().unwrap()], b"");
    let (mut all, mut rooted, mut worst) = (0u64, 0u64, (0u64, String::new()));
    for l in folded.lines() {
        let (stack, ns) = l.rsplit_once(' ').unwrap();
        let ns: u64 = ns.parse().unwrap();
        let first = stack.split(';').nth(1).unwrap_or("");
        // Time the hypervisor took: the thread's own stack-less [steal];
        // offcputime's on-CPU time, which has no stack (oncputime's has).
        if first.starts_with("[steal]") || first.starts_with("[on-CPU, not sampled]") {
            continue;
        }
        // The process tearing down its memory at exit: there is no user
        // stack left to read, only the leaf its registers name.
        if first == "[truncated]" && stack.contains("exit_mmap_[k]") {
            continue;
        }
        all += ns;
        // (_dl_start_user: the loader's own entry, before the program's
        // _start, running the libraries' constructors.)
        // arm64: glibc's thread_start in clone3 (named by libc6-dbg's
        // local symbols; x86-64's is a label, its frame clone3's), where
        // the chain of frame records ends.
        if matches!(first, "_start" | "clone3" | "_dl_start_user") || (cfg!(target_arch = "aarch64") && first == "thread_start") {
            rooted += ns;
        } else if ns > worst.0 {
            worst = (ns, stack.to_string());
        }
    }
    eprintln!("time in stacks from a thread's first frame: {:.2}% of {} ms", rooted as f64 * 100.0 / all as f64, all / 1_000_000);
    assert!(rooted as f64 >= all as f64 * min, "{rooted} of {all} ns rooted; the largest not: {} ns {}", worst.0, worst.1);
}
