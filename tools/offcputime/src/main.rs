use clap::Parser;

fn main() {
    let cli = offcputime::Cli::parse();
    wallclock_stream::cli::run_main("offcputime", || offcputime::run(cli));
}
