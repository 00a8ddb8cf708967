fn main() {
    eprintln!("oncputime: not built yet");
    std::process::exit(2);
}
