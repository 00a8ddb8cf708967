//! `mangen [--check] [ROOT]`: regenerate man/*.1 and completions/*.bash
//! under ROOT (default: the repository), or with --check fail when any
//! committed file differs from what the tools' flags say.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let check = args.iter().any(|a| a == "--check");
    let root = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")));
    match mangen::run(&root, check) {
        Ok(stale) if check && !stale.is_empty() => {
            eprintln!("mangen: stale (regenerate with `cargo run --release -p mangen`): {}", stale.join(", "));
            std::process::exit(1);
        }
        Ok(stale) => {
            for s in stale {
                eprintln!("mangen: wrote {s}");
            }
        }
        Err(e) => {
            eprintln!("mangen: error: {e:#}");
            std::process::exit(1);
        }
    }
}
