fn main() {
    let cli: wcdump::top::Cli = wallclock_stream::spellings::parse("wctop");
    wallclock_stream::cli::run_main("wctop", || wcdump::top::run(cli));
}
