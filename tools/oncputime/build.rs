use std::path::PathBuf;

fn main() {
    // Read when the script runs, not baked in when it is compiled: a target
    // directory copied from another checkout kept building that one's bpf/.
    let bpf = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR")).join("../../bpf");
    let arch = bpf_arch();
    let src = bpf.join("oncputime.bpf.c");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap()).join("oncputime.skel.rs");
    libbpf_cargo::SkeletonBuilder::new()
        .source(&src)
        .clang_args([
            format!("-I{}", bpf.display()),
            // vmlinux.h (and the registers' names) per architecture.
            format!("-I{}", bpf.join(arch).display()),
            // libbpf's usdt.bpf.h includes <linux/errno.h>, whose
            // <asm/errno.h> Debian keeps under the multiarch directory.
            format!("-I/usr/include/{}-linux-gnu", std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into())),
            "-Wno-compare-distinct-pointer-types".into(),
        ])
        .build_and_generate(&out)
        .expect("building bpf/oncputime.bpf.c (needs clang)");
    for f in ["oncputime.bpf.c", "capture.bpf.h", "python.bpf.h", "ruby.bpf.h", "tree.bpf.h", "snapshot.bpf.h", "dethread.bpf.h", "probe.bpf.h", "wallclock.h", "compat.bpf.h", "walkout.bpf.h", "fingerprint.bpf.h", "waker.bpf.h", "timeline.bpf.h"] {
        println!("cargo:rerun-if-changed={}", bpf.join(f).display());
    }
    for f in ["vmlinux.h", "regs.bpf.h"] {
        println!("cargo:rerun-if-changed={}", bpf.join(arch).join(f).display());
    }
}

/// The folder of bpf/ with the target architecture's vmlinux.h (its
/// kernel types as that architecture's BTF lays them out) and regs.bpf.h
/// (its registers and numbers).
fn bpf_arch() -> &'static str {
    match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x86",
        Ok("aarch64") => "arm64",
        other => panic!("the BPF programs are built for x86_64 and aarch64, not {other:?}"),
    }
}
