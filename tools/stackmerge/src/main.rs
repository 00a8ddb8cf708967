use clap::Parser;

fn main() {
    let cli = stackmerge::Cli::parse();
    wallclock_stream::cli::run_main("stackmerge", || stackmerge::run(&cli).map(|()| 0));
}
