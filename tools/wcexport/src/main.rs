fn main() {
    let cli: wcexport::Cli = wallclock_stream::spellings::parse("wcexport");
    wallclock_stream::cli::run_main("wcexport", || wcexport::run(&cli).map(|()| 0));
}
