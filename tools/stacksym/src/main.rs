//! stacksym: raw stack addresses to names. The work is in the library.
use clap::Parser;

fn main() {
    let cli = stacksym::Cli::parse();
    wallclock_stream::cli::run_main("stacksym", || stacksym::run(&cli));
}
