fn main() {
    eprintln!("offcputime: not built yet");
    std::process::exit(2);
}
