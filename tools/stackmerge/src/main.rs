fn main() {
    let cli: stackmerge::Cli = wallclock_stream::spellings::parse("stackmerge");
    wallclock_stream::cli::run_main("stackmerge", || stackmerge::run(&cli).map(|()| 0));
}
