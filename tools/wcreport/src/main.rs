fn main() {
    eprintln!("wcreport: not built yet");
    std::process::exit(2);
}
