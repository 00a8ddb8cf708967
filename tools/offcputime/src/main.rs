fn main() {
    let cli: offcputime::Cli = wallclock_stream::spellings::parse("offcputime");
    wallclock_stream::cli::run_main("offcputime", || offcputime::run(cli));
}
