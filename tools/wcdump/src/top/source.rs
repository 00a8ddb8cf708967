//! The capture under `wctop`: offcputime itself, run with `--every` so
//! that each interval is one of its windows (FILE.N: the exact per-thread
//! on-CPU and off-CPU time by state of that second, and the off-CPU
//! stacks), the same accounting as its report.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use wallclock_stream::{Reader, Record};

pub enum Target {
    Pid(u32),
    Cgroup(PathBuf),
}

pub struct Source {
    child: Option<Child>,
    dir: tempfile::TempDir,
    next: u32,
}

fn offcputime() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("where is wctop")?;
    let p = exe.parent().map(|d| d.join("offcputime")).filter(|p| p.exists());
    p.with_context(|| format!("offcputime is not beside {}: build the workspace or install the tools together", exe.display()))
}

impl Source {
    pub fn start(target: &Target, every_s: f64) -> Result<Source> {
        let dir = tempfile::Builder::new().prefix("wctop.").tempdir().context("a scratch folder for the capture")?;
        let mut cmd = Command::new(offcputime()?);
        match target {
            Target::Pid(p) => cmd.args(["-p", &p.to_string()]),
            Target::Cgroup(c) => cmd.arg("--cgroup").arg(c),
        };
        let err = std::fs::File::create(dir.path().join("err")).context("offcputime's stderr file")?;
        cmd.arg("--every").arg(every_s.to_string()).arg("-o").arg(dir.path().join("off.stream"));
        // Its own process group: a Ctrl-C at the terminal is ours to
        // handle, and we stop it.
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(err).process_group(0);
        let child = cmd.spawn().context("starting offcputime")?;
        Ok(Source { child: Some(child), dir, next: 1 })
    }

    fn window(&self, n: u32) -> PathBuf {
        self.dir.path().join(format!("off.stream.{n}"))
    }

    /// The next window's records, once written.
    pub fn poll(&mut self) -> Result<Option<Vec<Record>>> {
        let p = self.window(self.next);
        if !p.exists() {
            if let Some(c) = self.child.as_mut() {
                if let Some(st) = c.try_wait()? {
                    self.child = None;
                    if !st.success() && !self.window(self.next).exists() {
                        bail!("offcputime {st}: {}", last_line(&self.dir.path().join("err")));
                    }
                }
            }
            if !self.window(self.next).exists() {
                return Ok(None);
            }
        }
        self.next += 1;
        let f = std::fs::File::open(&p).with_context(|| format!("open {}", p.display()))?;
        let r = Reader::new(std::io::BufReader::new(f), &p.display().to_string(), Default::default());
        let recs = r.collect::<Result<Vec<Record>, _>>().with_context(|| format!("read {}", p.display()))?;
        std::fs::remove_file(&p).ok();
        Ok(Some(recs))
    }

    /// Whether the capture ended (its target exited) with no window left.
    pub fn ended(&mut self) -> bool {
        self.child.is_none() && !self.window(self.next).exists()
    }

    /// Stop the capture (it writes its last window and exits).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(3) {
                if c.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        self.stop();
    }
}

fn last_line(p: &Path) -> String {
    let s = std::fs::read_to_string(p).unwrap_or_default();
    s.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("exited").to_string()
}
