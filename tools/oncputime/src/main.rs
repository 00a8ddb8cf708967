use clap::Parser;

fn main() {
    let cli = oncputime::Cli::parse();
    wallclock_stream::cli::run_main("oncputime", || oncputime::run(cli));
}
