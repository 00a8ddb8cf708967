fn main() {
    eprintln!("flame: not built yet");
    std::process::exit(2);
}
