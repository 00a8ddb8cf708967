//! flame: see the library docs and `flame --help`.
fn main() {
    let cli: flame::Cli = wallclock_stream::spellings::parse("flame");
    wallclock_stream::cli::run_main("flame", || flame::run(&cli));
}
