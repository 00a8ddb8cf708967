fn main() {
    let cli: oncputime::Cli = wallclock_stream::spellings::parse("oncputime");
    wallclock_stream::cli::run_main("oncputime", || oncputime::run(cli));
}
