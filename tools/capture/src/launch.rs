//! Launching `-- COMMAND ARGS` held before exec until the capture is
//! attached, so it is captured from its first instruction. (std's Command
//! waits for the exec to happen, so this forks by hand.) gputrace launches
//! through here too, with its CUPTI injection variables added to the
//! environment.

use std::ffi::{CString, OsString};
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};

use anyhow::{bail, Context, Result};

pub struct Launched {
    pid: i32,
    go: Option<std::fs::File>,
    code: Option<i32>,
    exec_check: Option<std::fs::File>,
    name: String,
}

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("pipe");
    }
    // SAFETY: both fds were just created and are owned here.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn decode(status: i32) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

/// Start `argv` held before exec. When `stream_on_stdout`, its stdout
/// goes to our stderr so the stream stays clean.
pub fn spawn_held(argv: &[String], stream_on_stdout: bool) -> Result<Launched> {
    spawn_held_env(argv, stream_on_stdout, &[])
}

/// Our environment with `set` added (replacing a variable of the same
/// name), as `NAME=VALUE` strings for execvpe.
fn environment(set: &[(OsString, OsString)]) -> Result<Vec<CString>> {
    use std::os::unix::ffi::OsStrExt;
    let mut vars: Vec<(OsString, OsString)> =
        std::env::vars_os().filter(|(k, _)| !set.iter().any(|(s, _)| s == k)).collect();
    vars.extend(set.iter().cloned());
    vars.iter()
        .map(|(k, v)| {
            let mut b = k.as_bytes().to_vec();
            b.push(b'=');
            b.extend_from_slice(v.as_bytes());
            CString::new(b).with_context(|| format!("NUL in the environment variable {}", k.to_string_lossy()))
        })
        .collect()
}

/// [`spawn_held`] with variables added to the command's environment.
pub fn spawn_held_env(argv: &[String], stream_on_stdout: bool, env: &[(OsString, OsString)]) -> Result<Launched> {
    if argv.is_empty() {
        bail!("no command after `--`");
    }
    let cargs: Vec<CString> =
        argv.iter().map(|a| CString::new(a.as_bytes())).collect::<Result<_, _>>().context("NUL in command")?;
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // Built before the fork: the child may only make async-signal-safe calls.
    let cenv = if env.is_empty() { Vec::new() } else { environment(env)? };
    let mut envp: Vec<*const libc::c_char> = cenv.iter().map(|c| c.as_ptr()).collect();
    envp.push(std::ptr::null());
    let (r, w) = pipe()?;
    let (er, ew) = pipe()?;
    use std::os::fd::AsRawFd;
    let (rfd, wfd, ewfd) = (r.as_raw_fd(), w.as_raw_fd(), ew.as_raw_fd());
    // SAFETY: the child only calls async-signal-safe functions before exec.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error()).context("fork");
    }
    if pid == 0 {
        // SAFETY: child side; async-signal-safe calls only, then exec or _exit.
        unsafe {
            // Only the capture holds the go pipe's write end: when it ends
            // without releasing us (it failed to load, or was killed), the
            // read sees end-of-file and the command is never run, instead
            // of waiting forever.
            libc::close(wfd);
            let mut b = [0u8; 1];
            if libc::read(rfd, b.as_mut_ptr() as *mut libc::c_void, 1) != 1 {
                libc::_exit(127);
            }
            if stream_on_stdout {
                libc::dup2(2, 1);
            }
            // Rust ignores SIGPIPE and an ignored signal stays ignored
            // across exec: give the command the default, as std's Command
            // does (`yes | head` must end).
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            if cenv.is_empty() {
                libc::execvp(ptrs[0], ptrs.as_ptr());
            } else {
                libc::execvpe(ptrs[0], ptrs.as_ptr(), envp.as_ptr());
            }
            let e = *libc::__errno_location();
            libc::write(ewfd, &e as *const i32 as *const libc::c_void, 4);
            libc::_exit(127);
        }
    }
    drop(r);
    drop(ew);
    Ok(Launched {
        pid,
        go: Some(std::fs::File::from(w)),
        code: None,
        exec_check: Some(std::fs::File::from(er)),
        name: argv[0].clone(),
    })
}

impl Launched {
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }
    /// Let it exec; fails when the command cannot be run.
    pub fn release(&mut self) -> Result<()> {
        if let Some(mut w) = self.go.take() {
            w.write_all(b"g").context("releasing the launched command")?;
        }
        if let Some(mut er) = self.exec_check.take() {
            use std::io::Read;
            let mut b = [0u8; 4];
            if er.read_exact(&mut b).is_ok() {
                let e = std::io::Error::from_raw_os_error(i32::from_ne_bytes(b));
                self.wait_exit_code();
                bail!("cannot run {}: {e}", self.name);
            }
        }
        Ok(())
    }
    /// Its exit code when it has exited (128+signal when killed).
    pub fn try_exit_code(&mut self) -> Option<i32> {
        if self.code.is_none() {
            let mut st = 0;
            // SAFETY: waiting on our own child.
            if unsafe { libc::waitpid(self.pid, &mut st, libc::WNOHANG) } == self.pid {
                self.code = Some(decode(st));
            }
        }
        self.code
    }
    pub fn wait_exit_code(&mut self) -> i32 {
        self.go.take();
        if let Some(c) = self.code {
            return c;
        }
        let mut st = 0;
        // SAFETY: waiting on our own child.
        let r = unsafe { libc::waitpid(self.pid, &mut st, 0) };
        let c = if r == self.pid { decode(st) } else { 1 };
        self.code = Some(c);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The held command runs only once released, with the variables
    /// added, SIGPIPE at its default, and its exit code passed on.
    #[test]
    fn held_command_gets_its_environment_and_default_sigpipe() {
        let dir = std::env::temp_dir().join(format!("wallclock-launch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("status");
        let script = format!("test \"$WALLCLOCK_T\" = 'a b' || exit 9; grep SigIgn /proc/$$/status > '{}'; exit 7", out.display());
        let argv = ["sh".to_string(), "-c".to_string(), script];
        let env = [(OsString::from("WALLCLOCK_T"), OsString::from("a b"))];
        let mut l = spawn_held_env(&argv, false, &env).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(l.try_exit_code().is_none() && !out.exists(), "it ran before its release");
        l.release().unwrap();
        assert_eq!(l.wait_exit_code(), 7, "wrong environment or exit code");
        let line = std::fs::read_to_string(&out).unwrap();
        let mask = u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap();
        assert_eq!(mask & (1 << (libc::SIGPIPE - 1)), 0, "SIGPIPE ignored in the command: {line}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A capture that ends without releasing its command (its BPF program
    /// failed to load) leaves no held process behind, and nothing ran.
    #[test]
    fn an_unreleased_command_never_runs_and_ends() {
        let dir = std::env::temp_dir().join(format!("wc-unreleased-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("ran");
        let argv = ["sh".to_string(), "-c".to_string(), format!("touch {}", out.display())];
        let l = spawn_held(&argv, false).unwrap();
        let pid = l.pid() as i32;
        drop(l);
        let mut st = 0;
        // SAFETY: waiting on our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut st, 0) }, pid, "the held command did not end");
        assert_eq!(decode(st), 127);
        assert!(!out.exists(), "it ran without a release");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_command_that_cannot_run_fails_its_release() {
        let mut l = spawn_held(&["/nonexistent/wallclock-cmd".to_string()], false).unwrap();
        let e = l.release().unwrap_err().to_string();
        assert!(e.starts_with("cannot run /nonexistent/wallclock-cmd: No such file"), "{e}");
    }
}
