//! Rust types for the records the BPF programs write, generated from
//! bpf/wallclock.h itself (bindgen): no hand copy that a reordered field
//! could silently disagree with. bindgen also writes a const assertion of
//! every field's offset and every struct's size, as clang laid them out.

use std::path::PathBuf;

fn main() {
    // Read when the script runs, not baked in when it is compiled: a target
    // directory copied from another checkout kept building that one's bpf/.
    let bpf = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR")).join("../../bpf");
    let header = bpf.join("wallclock.h");
    println!("cargo:rerun-if-changed={}", header.display());
    // The BPF side takes __u64 and friends from vmlinux.h; these are theirs.
    let wrapper = format!(
        "typedef unsigned char __u8;\ntypedef int __s32;\ntypedef unsigned int __u32;\ntypedef unsigned long long __u64;\n#include \"{}\"\n",
        header.display()
    );
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap()).join("wallclock_h.rs");
    bindgen::Builder::default()
        .header_contents("wallclock_wrapper.h", &wrapper)
        .allowlist_type("wc_.*")
        .allowlist_var("WC_.*")
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_eq(true)
        .derive_hash(true)
        .layout_tests(true)
        .use_core()
        .generate()
        .expect("bindgen over bpf/wallclock.h (needs libclang, from Debian's clang)")
        .write_to_file(&out)
        .expect("writing wallclock_h.rs");
}
