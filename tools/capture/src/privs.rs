//! Privilege and kernel checks that turn an EPERM into a sentence.

use anyhow::{bail, Result};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

fn effective_caps() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

/// Fails with one line naming what is missing and how to run.
pub fn check(tool: &str) -> Result<()> {
    let caps = effective_caps();
    let has = |c: u32| caps & (1u64 << c) != 0;
    if !(has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))) {
        let missing: Vec<&str> = [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
            .iter()
            .filter(|(c, _)| !has(*c))
            .map(|(_, n)| *n)
            .collect();
        bail!(
            "{tool} needs root (or {}): run it as `sudo {tool} ...` or grant `setcap cap_bpf,cap_perfmon+ep $(which {tool})`",
            missing.join(" and ")
        );
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        bail!("this kernel has no BTF (/sys/kernel/btf/vmlinux is missing): {tool} needs a kernel built with CONFIG_DEBUG_INFO_BTF=y");
    }
    Ok(())
}
