use clap::Parser;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cli = wcdump::top::Cli::parse_from(&args);
    if let Some(w) = wcdump::top::old_spelling(&args[1..]) {
        eprintln!("{w}");
    }
    wallclock_stream::cli::run_main("wctop", || wcdump::top::run(cli));
}
