fn main() {
    eprintln!("stacksym: not built yet");
    std::process::exit(2);
}
