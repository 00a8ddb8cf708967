//! flame: see the library docs and `flame --help`.
use clap::Parser;

fn main() {
    let cli = flame::Cli::parse();
    wallclock_stream::cli::run_main("flame", || flame::run(&cli));
}
