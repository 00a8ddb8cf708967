fn main() {
    let cli: wcreport::Cli = wallclock_stream::spellings::parse("wcreport");
    wallclock_stream::cli::run_main("wcreport", || wcreport::run(&cli).map(|()| 0));
}
