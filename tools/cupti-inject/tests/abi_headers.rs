//! The injection library's hand-written CUPTI ABI against NVIDIA's own
//! headers: a C program compiled with `cupti.h` (from PyPI's
//! `nvidia-cuda-cupti-cu12`, with the CUDA headers it includes) prints
//! `offsetof`/`sizeof` of every field `abi::READS` says the library reads,
//! for every record version it reads it from, and each must match.
//! The wheels are installed under `target/cuda` by `scripts/setup --tests`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use cupti_inject::abi::{FieldRead, PREFIXES, READS};

fn cuda_dir() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let d = root.join("target/cuda/nvidia");
    assert!(
        d.join("cuda_cupti/include/cupti_activity.h").exists(),
        "NVIDIA's CUPTI headers are missing under {}: run scripts/setup --tests (it installs the nvidia-cuda-cupti-cu12 wheels there)",
        d.display()
    );
    d
}

/// What the C compiler says: (struct, field) -> (offset, size); (struct, "") -> sizeof.
fn measured(reads: &[FieldRead]) -> std::collections::HashMap<(String, String), (usize, usize)> {
    let d = cuda_dir();
    let mut c = String::from(
        "#include <cupti.h>\n#include <stdio.h>\n#include <stddef.h>\n\
         #define F(T, f) printf(#T \" \" #f \" %zu %zu\\n\", offsetof(T, f), sizeof(((T *)0)->f));\n\
         #define S(T) printf(#T \" - %zu 0\\n\", sizeof(T));\nint main(void) {\n",
    );
    let mut structs = std::collections::BTreeSet::new();
    for r in reads {
        for s in r.structs {
            let _ = writeln!(c, "F({s}, {})", r.field);
            structs.insert(*s);
        }
    }
    for s in structs {
        let _ = writeln!(c, "S({s})");
    }
    c.push_str("return 0; }\n");
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let work = std::env::temp_dir().join(format!("cupti-abi-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("abi.c"), c).unwrap();
    let inc = |p: &str| format!("-I{}", d.join(p).display());
    let out = Command::new("gcc")
        .args([inc("cuda_cupti/include"), inc("cuda_runtime/include"), inc("cuda_nvcc/include")])
        .arg("-o")
        .arg(work.join("abi"))
        .arg(work.join("abi.c"))
        .output()
        .expect("gcc is needed");
    assert!(out.status.success(), "the headers do not compile: {}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(work.join("abi")).output().unwrap();
    let _ = std::fs::remove_dir_all(&work);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let field = if f[1] == "-" { String::new() } else { f[1].to_string() };
            ((f[0].to_string(), field), (f[2].parse().unwrap(), f[3].parse().unwrap()))
        })
        .collect()
}

#[test]
fn every_field_read_sits_where_nvidias_headers_put_it_in_every_accepted_version() {
    let m = measured(READS);
    let mut bad = Vec::new();
    let mut checked = 0;
    for r in READS {
        for s in r.structs {
            let (off, size) = m[&(s.to_string(), r.field.to_string())];
            checked += 1;
            if (off, size) != (r.offset, r.size) {
                bad.push(format!("{s}.{}: headers offset {off} size {size}, library {} {}", r.field, r.offset, r.size));
            }
            let (whole, _) = m[&(s.to_string(), String::new())];
            if r.offset + r.size > whole {
                bad.push(format!("{s}.{} read past the record's {whole} bytes", r.field));
            }
        }
    }
    for (structs, prefix) in PREFIXES {
        for s in *structs {
            let (whole, _) = m[&(s.to_string(), String::new())];
            if *prefix > whole {
                bad.push(format!("{s}: {whole} bytes, the library reads a {prefix}-byte prefix"));
            }
        }
    }
    assert!(bad.is_empty(), "ABI mismatches against NVIDIA's headers:\n{}", bad.join("\n"));
    assert!(checked > 100, "only {checked} (struct, field) pairs checked");
    eprintln!("checked {checked} (record version, field) pairs against NVIDIA's headers");
}

/// The graph id is read from the versions that have it, and no other:
/// Kernel4 (CUDA 10) is too short for it.
#[test]
fn graph_id_is_read_only_from_kernel_versions_that_have_it() {
    let kernel4 = [FieldRead { structs: &["CUpti_ActivityKernel4"], field: "kind", offset: 0, size: 4 }];
    let m = measured(&kernel4);
    let (k4, _) = m[&("CUpti_ActivityKernel4".to_string(), String::new())];
    let graph = READS.iter().find(|r| r.field == "graphId").unwrap();
    assert!(graph.offset + graph.size > k4, "Kernel4 ({k4} bytes) would hold the graph id: the version guard is moot");
    assert!(!graph.structs.contains(&"CUpti_ActivityKernel4"));
}
