fn main() {
    eprintln!("stackmerge: not built yet");
    std::process::exit(2);
}
