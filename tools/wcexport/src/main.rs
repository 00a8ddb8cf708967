use clap::Parser;

fn main() {
    let cli = wcexport::Cli::parse();
    wallclock_stream::cli::run_main("wcexport", || wcexport::run(&cli).map(|()| 0));
}
