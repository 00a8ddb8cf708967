use clap::Parser;

fn main() {
    let cli = wcdump::Cli::parse();
    wallclock_stream::cli::run_main("wcdump", || wcdump::run(cli));
}
