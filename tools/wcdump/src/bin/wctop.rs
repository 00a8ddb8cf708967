use clap::Parser;

fn main() {
    let cli = wcdump::top::Cli::parse();
    wallclock_stream::cli::run_main("wctop", || wcdump::top::run(cli));
}
