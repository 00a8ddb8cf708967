//! `scripts/wallclock`'s command line as a clap definition, for its man
//! page and completions (the script parses its own flags in bash; the
//! test `tests/manpages.rs` checks that the page, the script's parser and
//! its `--help` list the same flags). The sections clap has no place for
//! (environment, files, notes, signals, examples) are data here, written
//! in roff by [`page`].

use clap::{Arg, ArgAction, Command};

const DESCRIPTION: &str = "Captures on-CPU samples (oncputime(1)) and exact off-CPU time by thread state (offcputime(1)) of every thread of the target over the same window, symbolizes (stacksym(1)), merges (stackmerge(1)) and writes flame graphs (flame(1)), folded stacks and reports (wcreport(1)). A COMMAND is held until both captures are attached, so it is seen from its first instruction, with every process it starts (through fork, clone and exec: the children of a shell included); wallclock then exits with its exit code. Each process is its own root in the flame graph and its own section in the reports.

wallclock dump PID (every thread of PID now: its state, the time in it, its stack) runs wcdump(1); wallclock top [PID|--cgroup PATH] (a live per-thread view) runs wctop(1).

It calls its own tools by path (beside the script, ../target/release, $WALLCLOCK_BIN_DIR, or the directory of stacksym on PATH), never Debian's unrelated /usr/sbin/offcputime.";

/// A flag: its letter, its long name, its value's name (none: a switch),
/// what the page says of it.
fn opt(id: &'static str, short: Option<char>, long: Option<&'static str>, value: Option<&'static str>, help: &'static str) -> Arg {
    let mut a = Arg::new(id).help(help);
    if let Some(s) = short {
        a = a.short(s);
    }
    if let Some(l) = long {
        a = a.long(l);
    }
    match value {
        Some(v) => a.value_name(v).num_args(1),
        None => a.action(ArgAction::SetTrue),
    }
}

/// The script's flags, each with what its man page says of it.
pub fn command() -> Command {
    Command::new("wallclock")
        .about("profile where a process's wall-clock time goes, in one command")
        .long_about(DESCRIPTION)
        .version(env!("CARGO_PKG_VERSION"))
        .disable_version_flag(true)
        .override_usage("wallclock [OPTIONS] [-p] PID [DURATION]\n       wallclock [OPTIONS] --cgroup PATH [DURATION]\n       wallclock [OPTIONS] -- COMMAND [ARGS]...\n       wallclock dump [--json] PID\n       wallclock top [PID|--cgroup PATH] [-n N] [-s KEY]")
        .args([
            opt("duration", Some('d'), Some("duration"), Some("SECONDS"), "Capture duration (default 30 for a PID or a cgroup; a COMMAND is followed until it exits, or for SECONDS when given): the window, exactly. Both captures are prepared (loaded and attached), then activated at one instant, their window's start and end written into the kernel side before it comes, so that they record the very same interval, and the merged stream, the report, the pprof profile and the trace span it. A COMMAND's window opens at its exec."),
            opt("children", Some('C'), Some("children"), None, "With a PID: also every process it has started, and those it starts during the capture (offcputime(1) -C)."),
            opt("pid_flag", Some('p'), Some("pid"), Some("PID"), "The process to profile, as PID above (-p as in the capture tools)."),
            opt("cgroup", Some('G'), Some("cgroup"), Some("PATH"), "Every process in this cgroup v2 directory and the cgroups below it (a container, a systemd service), including processes started during the capture."),
            opt("frequency", Some('F'), Some("frequency"), Some("HZ"), "On-CPU sampling frequency, as -F in oncputime(1), gputrace(1) and stackmerge(1) (and perf, bcc). -f HZ and --freq, its old spellings, still work this release and warn: -f is --folded in the other tools.").short_alias('f').alias("freq").default_value("49"),
            opt("min_block", Some('m'), Some("min-block-time"), Some("USEC"), "Passed to offcputime(1) -m (not passed by default). Whatever it is, every off-CPU block keeps the stack and state it was spent in, however short: on real servers most waits last well under a millisecond."),
            opt("prefix", None, Some("prefix"), Some("PREFIX"), "Path prefix of every file written (default combined_profile_pidPID_YYYYmmdd_HHMMSS), as wcreport(1) --prefix. -o PREFIX, its old spelling, still works this release and warns: -o is one output file in the other tools.").short_alias('o'),
            opt("gpu", None, Some("gpu"), None, "Also trace CUDA activity with gputrace(1): a COMMAND runs with its CUPTI injection library; a running PID has the library loaded through ptrace for the capture's window (gputrace -p), then runs on."),
            opt("wakers", None, Some("wakers"), None, "Also record who woke each block (offcputime --wakers): the waker thread and the function it woke from, or [timer], [irq], [softirq]. The report lists each thread's top off-CPU stacks with their wakers and a WAITS ON table of who waits on whom; PREFIX.folded has blocked;--;waker lines (bcc offwaketime's layout, stackmerge --wakers) and PREFIX_wakers.svg draws them, wakers in purple."),
            opt("wake_depth", None, Some("wake-depth"), Some("N"), "With --wakers, follow chains N hops (1 to 8, as offcputime(1) --wake-depth): 1 is the waker alone; 2 adds what the waker itself last waited on (a worker's disk wait under the request that waited on the worker).").default_value("2"),
            opt("no_objects", None, Some("no-objects"), None, "Do not record what each block waited on (offcputime --no-objects). By default an off-CPU stack ends, after its state, in its object: the file ([file /var/lib/app/data]), socket ([tcp 127.0.0.1:5432], [unix /run/x.sock]), [pipe], lock ([lock g_ledger_lock]) or child ([child make 4242]) its system call waited on (object in wallclock-stream(5))."),
            opt("every", None, Some("every"), Some("SECONDS"), "Continuous profiling: the capture (one of each tool, never restarted) is cut into windows of SECONDS back to back (--every of offcputime(1) and oncputime(1)); each window's profile is written as PREFIX.N.pb.gz (N from 1) as soon as it closes. The windows tile the capture (one's end is the next one's start) and add up to it; the files of the whole capture are written at the end as usual."),
            opt("push", None, Some("push"), Some("URL"), "With --every: also send each window's profile to a Pyroscope-compatible server (wcexport --push)."),
            opt("app", None, Some("app"), Some("NAME"), "With --push: the application's name on the server."),
            opt("timeline", None, Some("timeline"), None, "Also keep every event with its time (offcputime --timeline, and gputrace --timeline with --gpu) and write PREFIX.trace.json."),
            opt("timeline_min", None, Some("timeline-min"), Some("USEC"), "With --timeline (implies it): blocks shorter than this are not slices of their own but stay inside the running slice around them, counted there (offcputime(1) --timeline-min)."),
            opt("probe", None, Some("probe"), Some("SPEC"), "Also record the program's own events (offcputime --probe, repeatable): u:FUNC[+OFF], uret:FUNC, usdt:PROVIDER:NAME, raw_tp:NAME (a kernel tracepoint on a target thread, its raw arguments), with parameters in parentheses (arg:N, arg:ret, stack (the user stack it fired in, in the trace), path:FILE, pid:PID) and settings between bars (| name:\"X\" |); @FILE reads one spec per line. A COMMAND's probes go on the file it executes; a PID's on its executable. Implies --timeline: each firing is an instant on its thread's track in PREFIX.trace.json, with its arguments. A probe that cannot attach (no such function or USDT probe) is a one-line error before the capture starts. USDT probes guarded by a semaphore (PostgreSQL's) have it raised for the capture by the kernel and lowered after.").action(ArgAction::Append),
            opt("span", None, Some("span"), Some("SPEC"), "A span: uspan:FUNC (a function's entry to its return) or 'A ~~ B' (a probe to the next firing of the other on the same thread), repeatable. Each span's off-CPU time by state is measured in the kernel from its thread's blocks between entry and exit, its on-CPU time is the rest of its wall time; the timeline's blocks and timed on-CPU samples only divide those between stacks. Writes PREFIX.spans.folded and PREFIX.spans.svg (the time inside the slow spans only, each stack under a root naming its span) and a SPANS section in the report: the number of spans, their latency p50, p90, p99 and max, and where the slow spans' time went by state and by own function. With --timeline the spans are slices on a track below their thread's.").action(ArgAction::Append),
            opt("slower_than", None, Some("slower-than"), Some("DURATION"), "With --span: the slow spans are those longer than DURATION (5ms, 250us, 1.5s); without it, every span."),
            opt("prepare", None, Some("prepare"), Some("WHEN"), "Set the captures up (load, attach) at WHEN, to start recording at --activate's WHEN. WHEN: @now, @HH:MM[:SS], @YYYY-MM-DDTHH:MM:SS (local time), +DURATION after the launch (+2s), /DURATION the next whole multiple of DURATION since the epoch (/5s: hosts given the same spec start together). See offcputime(1)."),
            opt("activate", None, Some("activate"), Some("WHEN"), "Start recording at WHEN (both captures at the same instant; -d counts from it; a COMMAND starts then). WHEN as for --prepare."),
            opt("no_python_perf", None, Some("no-python-perf"), None, "Start a COMMAND as it is. By default it runs with PYTHONPERFSUPPORT=1 (unless the environment already sets it), which CPython 3.12 and later read as -X perf: each Python function gets a trampoline listed in /tmp/perf-PID.map, so the stacks show every Python function (py::function:file) between the interpreter's C frames, from _start to the leaf, and the GIL wait as [GIL]. Other programs, and older Pythons, ignore the variable. A Python process one attaches to by PID shows its Python functions only if it was started with -X perf or PYTHONPERFSUPPORT=1."),
            Arg::new("pid").value_name("PID").help("The process to profile."),
            Arg::new("seconds").value_name("DURATION").help("Capture duration in seconds, as -d."),
            Arg::new("command").value_name("COMMAND").last(true).num_args(1..).help("Command to launch and profile from its first instruction to its exit, with every process it starts."),
        ])
}

/// (term, text) entries of the sections clap has no place for.
const ENVIRONMENT: &[(&str, &str)] = &[
    ("WALLCLOCK_BIN_DIR", "Where to find the tools first (see DESCRIPTION)."),
    ("WALLCLOCK_LAUNCHED", "The launch that --prepare/--activate +DURATION and /DURATION count from, CLOCK_REALTIME nanoseconds since the epoch. By default the moment wallclock started, read first thing from bash's own clock (no process is started for it), and kept when it starts itself again (see SIGNALS). A caller that has its own instant (a script starting captures on several hosts) may give it."),
];

const FILES: &[(&str, &str)] = &[
    ("PREFIX.svg, PREFIX.folded", "The combined flame graph and folded stacks (microseconds; on-CPU leaves end in _[c], off-CPU leaves in _[o], GPU leaves in _[g])."),
    ("PREFIX.stream", "The merged, symbolized stream (wallclock-stream(5))."),
    ("PREFIX.pb.gz", "The same profile in pprof's format (wcexport(1)), for go tool pprof, Pyroscope or Parca."),
    ("PREFIX.N.pb.gz", "With --every: the profile of window N."),
    ("PREFIX.trace.json", "With --timeline: the timeline (wcexport --trace), Chrome trace-event JSON for Perfetto UI (ui.perfetto.dev) or chrome://tracing: a track per thread under its process, slices named and coloured by state (running, runnable, sleeping, uninterruptible) with their stacks and objects, GPU activities on tracks of their own."),
    ("PREFIX.spans.folded, PREFIX.spans.svg", "With --span: the time inside the slow spans, each stack under a root naming its span (microseconds, leaves as in PREFIX.folded)."),
    ("PREFIX.goroutines.svg, PREFIX.goroutines.folded", "For a Go target: its goroutines sampled (at the sampling frequency, at most 100) with the state or wait reason each parked with (goroutine-microseconds; a GOROUTINES section in the report)."),
    ("PREFIX.tasks.svg, PREFIX.tasks.folded", "For a Python asyncio target: its tasks sampled, each pending task's await chain and state (task-microseconds; a TASKS section in the report)."),
    ("PREFIX_single_thread_analysis.txt", "The report, for a single-threaded target."),
    ("multithread_PREFIX/", "For a multi-threaded target: thread_TID_role.svg, .folded (rooted at the thread's own frames) and _analysis.txt per thread; beside it PREFIX_thread_analysis.txt, the per-thread overview. When the capture holds several processes (a command's children), each has its own directory multithread_PREFIX/name_PID/ of per-thread files, name being the process's name after exec. Each tool makes one pass whatever the number of threads."),
];

const NOTES: &str = "Once the capture is over, symbolizing and writing run at nice -10, side by side: they measure nothing any more and should not queue behind a busy target's threads.";

const SIGNALS: &str = "Ctrl-C (SIGINT), or SIGINT or SIGTERM sent to wallclock alone, stops the capture early; everything captured so far is symbolized and written, and wallclock exits with 130. This holds however it was started: a shell starts a script's background job, and nohup its command, with SIGINT ignored, which bash cannot trap; wallclock then starts itself again once with both signals at their default (env --default-signal).";

const EXAMPLES: &[&str] = &[
    "sudo wallclock 1234                    # 30 s of PID 1234",
    "sudo wallclock -d 10 --prefix slow 1234 # slow.svg, slow.folded, ...",
    "sudo wallclock -- ./server --port 8080 # from exec to exit",
    "sudo wallclock -- sh -c 'make -j2'     # the shell and every process it starts",
    "sudo wallclock -C 1234                 # 1234 and its children",
    "sudo wallclock --timeline -d 5 1234    # also 1234's timeline: PREFIX.trace.json",
    "sudo wallclock --every 60 --push http://pyroscope:4040 1234   # a profile a minute",
    "sudo wallclock --cgroup /sys/fs/cgroup/system.slice/nginx.service 10",
    "sudo wallclock dump 1234               # every thread of 1234 now",
];

const SEE_ALSO: &str = "offcputime(1), oncputime(1), gputrace(1), stacksym(1), stackmerge(1), wcreport(1), flame(1), wcexport(1), wcdump(1), wctop(1), wallclock-stream(5)";

/// Text as roff: backslashes and dashes escaped, no line starting with a
/// control character.
fn roff(text: &str) -> String {
    let t = text.replace('\\', "\\e").replace('-', "\\-");
    t.lines().map(|l| if l.starts_with(['.', '\'']) { format!("\\&{l}") } else { l.to_string() }).collect::<Vec<_>>().join("\n")
}

/// man/wallclock.1: clap's title, name, synopsis, description and options,
/// then the sections above.
pub fn page() -> std::io::Result<Vec<u8>> {
    let man = clap_mangen::Man::new(command()).date("2026-11");
    let mut w = Vec::new();
    man.render_title(&mut w)?;
    man.render_name_section(&mut w)?;
    man.render_synopsis_section(&mut w)?;
    man.render_description_section(&mut w)?;
    man.render_options_section(&mut w)?;
    let mut s = String::new();
    let entries = |s: &mut String, title: &str, items: &[(&str, &str)]| {
        s.push_str(&format!(".SH {title}\n"));
        for (term, text) in items {
            s.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", roff(term), roff(text)));
        }
    };
    entries(&mut s, "ENVIRONMENT", ENVIRONMENT);
    entries(&mut s, "FILES", FILES);
    s.push_str(&format!(".SH NOTES\n{}\n.SH SIGNALS\n{}\n", roff(NOTES), roff(SIGNALS)));
    s.push_str(&format!(".SH EXAMPLES\n.nf\n{}\n.fi\n", roff(&EXAMPLES.join("\n"))));
    s.push_str(&format!(".SH \"SEE ALSO\"\n{}\n", roff(SEE_ALSO)));
    w.extend_from_slice(s.as_bytes());
    man.render_version_section(&mut w)?;
    Ok(w)
}
