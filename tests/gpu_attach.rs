//! `gputrace -p PID`: attaching to a CUDA program that is already running
//! (the fake CUDA stack of tests/programs/gpu, started without any
//! injection), through ptrace. The fake driver logs every kernel it ran
//! with the CLOCK_MONOTONIC time it was issued: the ground truth of what
//! fell inside the window.

mod util;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use wallclock_stream::{Reader, ReaderOptions, Record};

fn fakes() -> &'static (PathBuf, PathBuf) {
    util::gpu_fakes("gpu-attach-fakes")
}

fn clean(cmd: Command) -> Command {
    util::without_cuda_env(cmd)
}

/// The program, started plainly (no injection, no CUPTI).
fn start(args: &[&str], truth: Option<&PathBuf>) -> Child {
    let mut cmd = clean(Command::new(&fakes().1));
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(t) = truth {
        cmd.env("FAKECUDA_TRUTH", t);
    }
    cmd.spawn().unwrap()
}

fn gputrace(pid: u32, extra: &[&str], out: &PathBuf) -> Output {
    let mut cmd = clean(Command::new(util::bin("gputrace")));
    cmd.arg("-p").arg(pid.to_string()).args(extra).arg("-o").arg(out);
    cmd.arg("--cupti").arg(fakes().0.join("libcupti.so.12"));
    cmd.output().unwrap()
}

fn records(path: &PathBuf) -> Vec<Record> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    Reader::new(text.as_bytes(), "out", ReaderOptions::default()).collect::<Result<_, _>>().expect("a valid stream")
}

#[test]
fn attach_records_the_windows_kernels_under_their_launch_stacks_and_lets_go() {
    if util::skip_without_root("gpu_attach") {
        return;
    }
    let work = util::scratch("gpu-attach");
    let truth = work.join("truth.txt");
    // 700 rounds 10 ms apart: about 7.5 s, attached from 1 s to 3 s and
    // again for 1 s; an untouched twin beside it gives the output to
    // compare with.
    let mut app = start(&["loop", "700", "10"], Some(&truth));
    let twin = start(&["loop", "700", "10"], None);
    std::thread::sleep(Duration::from_secs(1));
    // A link planted at the folder's old predictable name, pointing at a
    // file of ours: root must neither delete it nor write through it.
    let planted = PathBuf::from(format!("/tmp/wallclock-gputrace-{}", app.id()));
    let owned = work.join("owned.txt");
    std::fs::write(&owned, "mine\n").unwrap();
    let _ = std::fs::remove_file(&planted);
    std::os::unix::fs::symlink(&owned, &planted).unwrap();
    let out_path = work.join("out.jsonl");
    let out = gputrace(app.id(), &["-d", "2"], &out_path);
    let link = std::fs::read_link(&planted);
    let _ = std::fs::remove_file(&planted);
    assert!(out.status.success(), "gputrace -p: {}", String::from_utf8_lossy(&out.stderr));
    // Attached again (the library stays loaded after a window, as a
    // `wallclock --gpu PID` after a `gputrace -p PID` finds it): a window
    // of its own.
    let again_path = work.join("again.jsonl");
    let again = gputrace(app.id(), &["-d", "1"], &again_path);
    assert!(again.status.success(), "gputrace -p a second time: {}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(link.ok().as_ref(), Some(&owned), "the planted link is left as it was");
    assert_eq!(std::fs::read_to_string(&owned).unwrap(), "mine\n", "its target is unchanged");
    // Nothing of this capture is left in /tmp (its folder's name has the pid).
    let pid = app.id().to_string();
    let left: Vec<String> = std::fs::read_dir("/tmp")
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| (n.starts_with("wallclock-gputrace") || n.starts_with("gputrace-")) && n.contains(&pid))
        .collect();
    assert!(left.is_empty(), "left in /tmp after the capture: {left:?}");
    assert!(app.try_wait().unwrap().is_none(), "the program runs on after the capture");
    let app_out = app.wait_with_output().unwrap();
    let twin_out = twin.wait_with_output().unwrap();
    assert_eq!(app_out.status.code(), Some(3));
    assert_eq!(app_out.stdout, twin_out.stdout, "the program's own output is unchanged");
    assert_eq!(app_out.stderr, twin_out.stderr, "and its stderr");

    let first = matches_truth(&out_path, &truth, 2.0);
    let second = matches_truth(&again_path, &truth, 1.0);
    assert!(first < second, "the second window starts after the first: {first} {second}");
}

/// The kernels of the stream at `path` (a window of about `secs`) against
/// the fake driver's log of what it issued in that window: each kernel
/// under its launching function and main, as many and as long. The
/// window's start.
fn matches_truth(path: &PathBuf, truth: &PathBuf, secs: f64) -> u64 {
    let recs = records(path);
    let (start_ns, end_ns) = match &recs[0] {
        Record::Header(h) => (h.start_ns.expect("window start"), h.end_ns.expect("window end")),
        r => panic!("{r:?}"),
    };
    let got_secs = (end_ns - start_ns) as f64 / 1e9;
    assert!((secs - 0.1..secs + 1.0).contains(&got_secs), "the window is -d {secs}: {got_secs} s");
    // Truth: kernel CORR NAME NS ISSUED.
    let mut want: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let (mut before, mut after) = (0, 0);
    for l in std::fs::read_to_string(truth).unwrap().lines().filter(|l| l.starts_with("kernel ")) {
        let f: Vec<&str> = l.split(' ').collect();
        let t: u64 = f[4].parse().unwrap();
        if t < start_ns {
            before += 1;
        } else if t > end_ns {
            after += 1;
        } else {
            let e = want.entry(f[2].to_string()).or_default();
            e.0 += 1;
            e.1 += f[3].parse::<u64>().unwrap();
        }
    }
    assert!(before > 100 && after > 20, "kernels ran before ({before}) and after ({after}) the window");
    let sym = util::run("stacksym", &[], &std::fs::read(path).unwrap());
    assert!(sym.status.success(), "stacksym: {}", String::from_utf8_lossy(&sym.stderr));
    let sym: Vec<Record> = Reader::new(&sym.stdout[..], "sym", ReaderOptions::default()).collect::<Result<_, _>>().unwrap();
    let mut got: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for r in &sym {
        let Record::Stack(s) = r else { continue };
        let g = s.gpu.as_ref().unwrap();
        let name = g.name.clone().unwrap();
        let (mangled, launcher) = match name.as_str() {
            "gemm(float const*, float const*, float*, int)" => ("_Z4gemmPKfS0_Pfi", "launch_gemm"),
            "relu(float*, int)" => ("_Z4reluPfi", "launch_relu"),
            n => panic!("unexpected activity {n}"),
        };
        let funcs: Vec<&str> = s.frames.iter().map(|f| f.func.as_str()).collect();
        assert!(funcs.contains(&launcher) && funcs.contains(&"main"), "{name} under {launcher} and main: {funcs:?}");
        let e = got.entry(mangled.to_string()).or_default();
        e.0 += s.count;
        e.1 += s.ns;
    }
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
    for (k, (n, ns)) in &want {
        let (gn, gns) = got[k];
        // A launch at the very edge of the window may fall either side.
        assert!(gn.abs_diff(*n) <= 1, "{k}: {gn} kernels in the stream, {n} issued in the window");
        let per = ns / n;
        assert!(gns.abs_diff(*ns) <= per + 1000, "{k}: {gns} ns in the stream, {ns} ns issued in the window");
    }
    start_ns
}

fn one_line_error(out: &Output) -> String {
    assert!(!out.status.success(), "gputrace should fail");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}

#[test]
fn attach_errors_are_one_line() {
    if util::skip_without_root("gpu_attach") {
        return;
    }
    let work = util::scratch("gpu-attach-errors");
    let out = work.join("out.jsonl");
    // No such process.
    let err = one_line_error(&gputrace(999_999_999, &["-d", "1"], &out));
    assert!(err.contains("no process 999999999"), "{err}");
    // A process without CUDA.
    let mut sleeper = Command::new("sleep").arg("20").spawn().unwrap();
    let err = one_line_error(&gputrace(sleeper.id(), &["-d", "1"], &out));
    assert!(err.contains("has no CUDA runtime loaded"), "{err}");
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    // A process another tracer holds (this test, through PTRACE_SEIZE).
    let mut app = start(&["loop", "1000", "10"], None);
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: seizing our own child; it is killed below.
    assert_eq!(unsafe { libc::ptrace(libc::PTRACE_SEIZE, app.id() as i32, 0, 0) }, 0);
    let err = one_line_error(&gputrace(app.id(), &["-d", "1"], &out));
    assert!(err.contains("is already traced by"), "{err}");
    let _ = app.kill();
    let _ = app.wait();
    // A process that exits during the window: what it recorded is kept.
    let mut app = start(&["loop", "60", "10"], None);
    std::thread::sleep(Duration::from_millis(200));
    let o = gputrace(app.id(), &["-d", "5"], &out);
    let err = one_line_error(&o);
    assert!(err.contains("exited during the capture"), "{err}");
    assert_eq!(app.wait().unwrap().code(), Some(3), "the program ended as it would have");
    let kernels: u64 = records(&out).iter().filter_map(|r| if let Record::Stack(s) = r { Some(s.count) } else { None }).sum();
    assert!(kernels > 10, "the kernels before the exit are written: {kernels}");
}
