//! The dump program's skeleton, and Rust types of bpf/dump.h generated
//! from the header (bindgen, with its layout assertions): the record the
//! iterator writes is read with the same layout clang gave it.

use std::path::PathBuf;

fn main() {
    let bpf = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bpf");
    let arch = bpf_arch();
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    libbpf_cargo::SkeletonBuilder::new()
        .source(bpf.join("dump.bpf.c"))
        .clang_args([
            format!("-I{}", bpf.display()),
            // vmlinux.h (and the registers' names) per architecture.
            format!("-I{}", bpf.join(arch).display()),
            format!("-I/usr/include/{}-linux-gnu", std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into())),
        ])
        .build_and_generate(out_dir.join("dump.skel.rs"))
        .expect("building bpf/dump.bpf.c (needs clang)");
    let header = bpf.join("dump.h");
    let wrapper = format!(
        "typedef unsigned char __u8;\ntypedef unsigned int __u32;\ntypedef unsigned long long __u64;\n#include \"{}\"\n",
        header.display()
    );
    bindgen::Builder::default()
        .header_contents("dump_wrapper.h", &wrapper)
        .allowlist_type("wcd_.*")
        .allowlist_var("WCD_.*")
        .layout_tests(true)
        .use_core()
        .generate()
        .expect("bindgen over bpf/dump.h (needs libclang, from Debian's clang)")
        .write_to_file(out_dir.join("dump_h.rs"))
        .expect("writing dump_h.rs");
    for f in ["dump.bpf.c", "dump.h", "compat.bpf.h"] {
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
