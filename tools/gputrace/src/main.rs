//! gputrace: see the library docs.

fn main() {
    let cli: gputrace::Cli = wallclock_stream::spellings::parse("gputrace");
    wallclock_stream::cli::run_main("gputrace", || gputrace::run(&cli));
}
