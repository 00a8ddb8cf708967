use clap::Parser;

fn main() {
    let cli = wcreport::Cli::parse();
    wallclock_stream::cli::run_main("wcreport", || wcreport::run(&cli).map(|()| 0));
}
