fn main() {
    eprintln!("mangen: not built yet");
    std::process::exit(2);
}
