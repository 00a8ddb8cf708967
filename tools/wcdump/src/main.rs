fn main() {
    let cli: wcdump::Cli = wallclock_stream::spellings::parse("wcdump");
    wallclock_stream::cli::run_main("wcdump", || wcdump::run(cli));
}
