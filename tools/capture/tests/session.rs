//! Session against real processes: what the capture does when its target
//! changes between the argument check and the start.

use clap::Parser;
use wallclock_capture::session::Session;
use wallclock_capture::target::TargetArgs;
use wallclock_capture::unwind::Unwind;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    target: TargetArgs,
}

#[test]
fn tid_gone_at_the_start_is_an_error() {
    // A thread alive when the arguments are checked, gone when the capture
    // begins (it ended while the BPF programs loaded): before, the capture
    // wrote a stream without a single thread and succeeded.
    let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    let tid = child.id();
    let cli = Cli::parse_from(["offcputime", "-t", &tid.to_string(), "-d", "1"]);
    let mut sess = Session::prepare(&cli.target, None, &[]).expect("the thread exists now");
    child.kill().unwrap();
    child.wait().unwrap();
    let err = sess.begin(1, &cli.target.tids, &mut Unwind::new()).expect_err("the thread is gone");
    assert_eq!(err.to_string(), format!("thread {tid} (-t) exited before the capture began"));
}

#[test]
fn tid_alive_at_the_start_begins() {
    let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    let tid = child.id();
    let cli = Cli::parse_from(["offcputime", "-t", &tid.to_string(), "-d", "1"]);
    let mut sess = Session::prepare(&cli.target, None, &[]).unwrap();
    let r = sess.begin(1, &cli.target.tids, &mut Unwind::new());
    child.kill().unwrap();
    child.wait().unwrap();
    r.unwrap();
    assert!(sess.initial.contains_key(&tid), "the thread's state at the start is noted");
}
