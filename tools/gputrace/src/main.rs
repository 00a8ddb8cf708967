fn main() {
    eprintln!("gputrace: not built yet");
    std::process::exit(2);
}
