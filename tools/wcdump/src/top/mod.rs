//! `wctop [PID | --cgroup PATH]` (`wallclock top`): a live view of where
//! a process's threads spend their time, refreshed every interval: per
//! thread (per process with --cgroup or --per-process) the on-CPU, steal,
//! runnable, sleeping and disk shares of the last interval and the
//! function each was blocked in longest. Exact as the report is: the
//! intervals are windows of one offcputime capture (on-CPU from
//! switch-in to switch-out, blocks by state), see source.rs.

pub mod source;
pub mod table;
pub mod term;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Parser;

use source::{Source, Target};
use table::SortKey;

#[derive(Parser, Debug)]
#[command(
    name = "wctop",
    version,
    about = "Live per-thread on-CPU, runnable, sleeping and disk shares of a process (wallclock top)",
    after_help = "KEYS (live view):\n    o on-CPU, f off-CPU, r runnable, s sleeping, d disk, t tid, n name: sort by it\n    q or Ctrl-C: quit\n\nEXAMPLES:\n    sudo wctop 1234                  # live, per thread\n    sudo wctop 1234 -n 3 | cat       # three plain tables, one a second\n    sudo wctop --cgroup /sys/fs/cgroup/system.slice/nginx.service -s off\n    sudo wallclock top 1234          # the same through the wrapper"
)]
pub struct Cli {
    /// The process to watch, per thread.
    #[arg(value_name = "PID", required_unless_present_any = ["cgroup", "pid_flag"])]
    pub pid: Option<u32>,
    /// The process to watch, as the PID above (`-p` as in every capture tool).
    #[arg(short = 'p', long = "pid", value_name = "PID", conflicts_with = "pid")]
    pub pid_flag: Option<u32>,
    /// Watch every process in this cgroup v2 directory, per process.
    #[arg(short = 'G', long, value_name = "PATH", conflicts_with_all = ["pid", "pid_flag"])]
    pub cgroup: Option<PathBuf>,
    /// Refreshes before exiting (default: until q, Ctrl-C or the target's exit).
    #[arg(short = 'n', long = "iterations", value_name = "N")]
    pub iterations: Option<u32>,
    /// Seconds per interval. (`-d`/`--delay`, top's spelling, still work
    /// and warn: across the toolkit `-d` is a capture's duration.)
    #[arg(short = 'i', long = "interval", value_name = "SECONDS", default_value_t = 1.0, short_alias = 'd', alias = "delay")]
    pub interval: f64,
    /// What the rows are sorted by (keys o f r s d t n in the live view).
    #[arg(short = 's', long = "sort", value_enum, default_value_t = SortKey::On)]
    pub sort: SortKey,
    /// One row per process rather than per thread.
    #[arg(short = 'P', long)]
    pub per_process: bool,
}

pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

pub fn run(cli: Cli) -> Result<i32> {
    if !(cli.interval >= 0.1 && cli.interval.is_finite()) {
        bail!("-i must be at least 0.1 seconds, got {}", cli.interval);
    }
    let (target, title) = match (&cli.pid.or(cli.pid_flag), &cli.cgroup) {
        (Some(p), _) => {
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).map_err(|_| anyhow::anyhow!("no such process: {p}"))?;
            (Target::Pid(*p), format!("pid {p} ({})", comm.trim()))
        }
        (None, Some(c)) => {
            if !c.join("cgroup.procs").exists() {
                bail!("not a cgroup v2 directory: {}", c.display());
            }
            (Target::Cgroup(c.clone()), format!("cgroup {}", c.display()))
        }
        (None, None) => bail!("give a PID or --cgroup PATH"),
    };
    wallclock_capture::privs::check("wctop")?;
    let per_process = cli.per_process || cli.cgroup.is_some();
    wallclock_capture::signal::install();
    let mut src = Source::start(&target, cli.interval)?;
    let live = term::is_tty(libc::STDOUT_FILENO) && term::is_tty(libc::STDIN_FILENO);
    let term = if live { Some(term::Term::enter()?) } else { None };
    let mut engine = stacksym::Engine::new(stacksym::Options { tool: "wctop", no_lines: true, quiet: live, ..Default::default() });
    let mut key = cli.sort;
    let mut last: Option<table::Interval> = None;
    let mut shown = 0;
    let draw = |t: &term::Term, last: &Option<table::Interval>, key: SortKey| -> Result<()> {
        let mut lines = match last {
            Some(iv) => table::render(iv, &title, key, per_process, term::rows().saturating_sub(3)),
            None => vec![format!("wallclock top: {title}: starting the capture, first table in {:.1} s", cli.interval)],
        };
        lines.push(String::new());
        lines.push("q quit   sort: o on  f off  r runnable  s sleep  d disk  t tid  n name".into());
        Ok(t.draw(&lines)?)
    };
    if let Some(t) = &term {
        draw(t, &last, key)?;
    }
    let mut out = std::io::stdout();
    loop {
        if wallclock_capture::signal::stopped() {
            break;
        }
        if let Some(t) = &term {
            match t.key(Duration::from_millis(50)) {
                Some(b'q' | b'Q' | 3) => break,
                Some(k) => {
                    if let Some(k) = SortKey::from_key(k) {
                        key = k;
                        draw(t, &last, key)?;
                    }
                }
                None => {}
            }
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(recs) = src.poll()? {
            shown += 1;
            let iv = table::interval(shown, &recs, &mut engine, per_process);
            match &term {
                Some(t) => {
                    last = Some(iv);
                    draw(t, &last, key)?;
                }
                None => {
                    let lines = table::render(&iv, &title, key, per_process, usize::MAX);
                    writeln!(out, "{}\n", lines.join("\n"))?;
                    out.flush()?;
                }
            }
            if cli.iterations.is_some_and(|n| shown >= n) {
                break;
            }
        } else if src.ended() {
            drop(term);
            eprintln!("wctop: the target exited");
            return Ok(0);
        }
    }
    drop(term);
    src.stop();
    Ok(0)
}
