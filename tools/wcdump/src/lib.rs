//! `wcdump PID` (`wallclock dump PID`): every thread of a process now,
//! as py-spy dump or jstack show it: its name, its state (running,
//! runnable, sleeping, disk, stopped), for how long it has been in that
//! state, and its whole stack, kernel and user frames named. No capture
//! window: one pass of a BPF task iterator reads each thread's state and
//! stacks once (bpf/dump.bpf.c); the user stack is unwound with the
//! capture's own unwinder (.eh_frame, HotSpot's frames, V8's JavaScript
//! named, as the capture walks and names them) and named by stacksym's engine; CPython's frames
//! are read from the process and put among them (`python`). A blocked
//! thread's object, what it waits on (a file, socket, pipe, lock or child,
//! named as a capture names it: wallclock-stream(5)'s `object`), is read
//! from its system call in /proc right after the pass; a lock known by
//! its address is named by its commonest call site among the threads
//! (`lock in worker_loop`), its address kept.

pub mod python;
pub mod read;
pub mod state;
pub mod text;
pub mod top;

use std::io::Write;
use std::time::Instant;

use anyhow::{bail, Result};
use clap::Parser;
use serde::Serialize;
use wallclock_capture::objects::{Namer, Obj};
use wallclock_capture::unwind::Unwind;
use wallclock_stream::{Frame, Kind, Record, Stack};

#[derive(Parser, Debug)]
#[command(
    name = "wcdump",
    version,
    about = "Every thread of a process now: state, time in it, whole stack (wallclock dump)",
    after_help = "EXAMPLES:\n    sudo wcdump 1234            # each thread's state and stack, leaf first\n    sudo wcdump --json 1234     # the same as one JSON object\n    sudo wallclock dump 1234    # the same through the wrapper"
)]
pub struct Cli {
    /// The process to dump.
    #[arg(value_name = "PID", required_unless_present = "pid_flag")]
    pub pid: Option<u32>,
    /// The process to dump, as the PID above (`-p` as in every capture tool).
    #[arg(short = 'p', long = "pid", value_name = "PID", conflicts_with = "pid")]
    pub pid_flag: Option<u32>,
    /// One JSON object: {pid, comm, read_ms, threads: [{tid, name, state,
    /// state_s, cpu_s, at_ns, object (what a blocked one waits on;
    /// object_raw, the address of a lock named by its call site), frames
    /// (leaf first)}]}.
    #[arg(long)]
    pub json: bool,
    /// Kernel frames left out.
    #[arg(long)]
    pub no_kernel: bool,
}

pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// One thread as the dump shows it.
#[derive(Debug, Serialize)]
pub struct Thread {
    pub tid: u32,
    pub name: String,
    /// running, runnable, sleeping, disk, stopped, traced, idle, zombie.
    pub state: &'static str,
    /// Seconds since it entered that state (absent when the kernel
    /// cannot tell: a thread woken onto another CPU and not yet run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_s: Option<f64>,
    /// Its CPU time since it started, seconds.
    pub cpu_s: f64,
    /// When it was read (CLOCK_MONOTONIC ns): `state_s` is up to then.
    pub at_ns: u64,
    /// What it waits on, when blocked in a system call on one object
    /// (`file PATH`, `tcp 127.0.0.1:5432`, `pipe`, `lock g_lock`, `child
    /// make 4242`...: wallclock-stream(5)'s `object`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// A lock known by its address and named by its call site (`lock in
    /// worker_loop`): the address, `lock 0x7f..`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_raw: Option<String>,
    /// Its stack, leaf first: kernel frames, then user frames.
    pub frames: Vec<Frame>,
}

#[derive(Debug, Serialize)]
pub struct Dump {
    pub pid: u32,
    pub comm: String,
    /// Milliseconds from the start of the read to the named stacks.
    pub read_ms: f64,
    pub threads: Vec<Thread>,
}

/// The threads of `pid` now, with named stacks.
pub fn dump(pid: u32, kernel: bool) -> Result<Dump> {
    let t0 = Instant::now();
    if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        bail!("no such process: {pid}");
    }
    wallclock_capture::privs::check("wcdump")?;
    // The kernel's symbols are copied from /proc/kallsyms on a thread of
    // their own while the threads are read, and both readers of them (the
    // symbolizer, stacksym's table of kernel text) read the copy: the
    // kernel formats that file's lines slowly, and read twice it was a
    // third of a dump's CPU time.
    let mut engine = stacksym::Engine::new(stacksym::Options { tool: "wcdump", ..Default::default() });
    if kernel {
        engine.read_kallsyms_ahead();
    }
    // A thread's id stands for its process.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let pid = status.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|v| v.trim().parse().ok()).unwrap_or(pid);
    let raws = read::threads(pid)?;
    if raws.is_empty() {
        bail!("process {pid} has no threads to read (it exited, or is a kernel thread group)");
    }
    // What the blocked ones wait on, read at once (the naming can wait).
    let objs: Vec<Obj> =
        raws.iter().map(|r| if state::blocked(r) { Namer::blocked_now(r.pid, r.tid) } else { Obj::default() }).collect();
    let mut py_failed = 0;
    let mut py = python::read(pid, &mut py_failed);
    if py_failed > 0 {
        eprintln!("wcdump: the Python frames of {py_failed} thread(s) changed as they were read: their native frames only");
    }
    let mut unwind = Unwind::new();
    let mut stacks = Vec::with_capacity(raws.len());
    for r in &raws {
        let mut s = Stack::new(Kind::Off, r.pid, r.tid, &r.comm());
        if r.ip != 0 {
            s.ustack = unwind.unwind_named(r.pid, r.now, r.ip, r.sp, r.bp, r.lr, r.ustack());
        }
        if kernel {
            s.kstack = r.kstack().iter().rev().copied().collect();
        }
        stacks.push(s);
    }
    let mut records: Vec<Record> = unwind.maps_records().into_iter().map(Record::Maps).collect();
    records.extend(stacks.into_iter().map(Record::Stack));
    engine.prepare_records(&records);
    let mut threads = Vec::with_capacity(raws.len());
    let named = records.iter().filter_map(|r| match r {
        Record::Stack(s) => Some(s),
        _ => None,
    });
    let namer = Namer::default();
    for ((r, s), o) in raws.iter().zip(named).zip(objs) {
        let mut frames = engine.frames(s);
        frames.reverse();
        let p = py.remove(&r.tid).unwrap_or_default();
        let frames = python::splice(frames, &p.runs);
        threads.push(Thread {
            tid: r.tid,
            name: p.name.unwrap_or_else(|| r.comm()),
            state: state::name(r),
            state_s: (r.since != 0).then(|| r.now.saturating_sub(r.since) as f64 / 1e9),
            cpu_s: r.exec_ns as f64 / 1e9,
            at_ns: r.now,
            object: namer.name(r.pid, o, &|_| None),
            object_raw: None,
            frames,
        });
    }
    name_locks(pid, &mut threads);
    let comm = threads.iter().find(|t| t.tid == pid).map(|t| t.name.clone()).unwrap_or_default();
    Ok(Dump { pid, comm, read_ms: t0.elapsed().as_secs_f64() * 1e3, threads })
}

/// Locks known by their address named by their commonest call site over
/// the blocked threads, each weighed by its time in its state
/// (`wallclock_stream::locks`, as a capture's are), the address kept in
/// `object_raw`.
fn name_locks(pid: u32, threads: &mut [Thread]) {
    let mut sites = wallclock_stream::locks::LockSites::default();
    for t in threads.iter() {
        if let Some(o) = &t.object {
            sites.add((pid, 0), o, &t.frames, t.state_s.map_or(1, |s| (s * 1e9) as u64).max(1));
        }
    }
    let names = sites.names();
    for t in threads.iter_mut() {
        let Some(name) = t.object.as_deref().and_then(|o| names.get((pid, 0), o)) else { continue };
        t.object_raw = t.object.replace(name.to_string());
    }
}

pub fn run(cli: Cli) -> Result<i32> {
    let Some(pid) = cli.pid.or(cli.pid_flag) else { bail!("give a PID") };
    let d = dump(pid, !cli.no_kernel)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if cli.json {
        serde_json::to_writer(&mut out, &d)?;
        writeln!(out)?;
    } else {
        text::write(&mut out, &d)?;
    }
    out.flush()?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked(tid: u32, site: &str, object: &str, state_s: f64) -> Thread {
        let frames = [Frame::kernel("futex_wait"), Frame::named("pthread_mutex_lock"), Frame::named(site), Frame::named("start_thread")];
        Thread { tid, name: "t".into(), state: "sleeping", state_s: Some(state_s), cpu_s: 0.0, at_ns: 0, object: Some(object.into()), object_raw: None, frames: frames.to_vec() }
    }

    /// Threads blocked on one heap lock from two places: it is named by
    /// the one where they have waited longest, its address kept; a
    /// symbol's lock stays.
    #[test]
    fn heap_locks_named_by_their_call_site() {
        let mut t = vec![blocked(2, "audit", "lock 0x7f0010", 0.5), blocked(3, "withdraw", "lock 0x7f0010", 2.0), blocked(4, "withdraw", "lock g_lock", 9.0)];
        name_locks(1, &mut t);
        assert_eq!((t[0].object.as_deref(), t[0].object_raw.as_deref()), (Some("lock in withdraw"), Some("lock 0x7f0010")));
        assert_eq!(t[1].object.as_deref(), Some("lock in withdraw"));
        assert_eq!((t[2].object.as_deref(), t[2].object_raw.as_deref()), (Some("lock g_lock"), None));
    }
}
