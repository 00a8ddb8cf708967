//! gputrace: see the library docs.

use clap::Parser;

fn main() {
    let cli = gputrace::Cli::parse();
    wallclock_stream::cli::run_main("gputrace", || gputrace::run(&cli));
}
