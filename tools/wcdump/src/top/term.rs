//! The live view's terminal: keys read one at a time without echo (and
//! Ctrl-C read as a key, not a signal), the alternate screen; all of it
//! put back as it was when the guard drops, on every way out (a return,
//! an error, a panic unwinding, a SIGTERM ending the loop).

use std::io::Write;
use std::time::Duration;

pub struct Term {
    saved: libc::termios,
}

const IN: i32 = libc::STDIN_FILENO;

pub fn is_tty(fd: i32) -> bool {
    // SAFETY: isatty on a descriptor number has no preconditions.
    unsafe { libc::isatty(fd) == 1 }
}

/// Rows of the terminal on stdout (24 when it cannot say).
pub fn rows() -> usize {
    // SAFETY: ws is a valid winsize for TIOCGWINSZ to fill.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: as above; stdout is a descriptor of ours.
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_row > 0 {
        ws.ws_row as usize
    } else {
        24
    }
}

impl Term {
    pub fn enter() -> std::io::Result<Term> {
        // SAFETY: a termios for tcgetattr to fill.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: stdin is a terminal (checked by the caller), t valid.
        if unsafe { libc::tcgetattr(IN, &mut t) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let saved = t;
        t.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG | libc::IEXTEN);
        t.c_cc[libc::VMIN] = 0;
        t.c_cc[libc::VTIME] = 0;
        // SAFETY: as above.
        if unsafe { libc::tcsetattr(IN, libc::TCSAFLUSH, &t) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let term = Term { saved };
        // Alternate screen, cursor hidden.
        let mut o = std::io::stdout();
        o.write_all(b"\x1b[?1049h\x1b[?25l")?;
        o.flush()?;
        Ok(term)
    }

    /// A key pressed within `wait`, if any.
    pub fn key(&self, wait: Duration) -> Option<u8> {
        let mut p = libc::pollfd { fd: IN, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, wait.as_millis() as i32) };
        if n <= 0 {
            return None;
        }
        let mut b = [0u8; 1];
        // SAFETY: reads at most one byte into b.
        let got = unsafe { libc::read(IN, b.as_mut_ptr().cast(), 1) };
        (got == 1).then_some(b[0])
    }

    pub fn draw(&self, lines: &[String]) -> std::io::Result<()> {
        let mut o = std::io::stdout().lock();
        o.write_all(b"\x1b[H\x1b[2J")?;
        for l in lines {
            o.write_all(l.as_bytes())?;
            o.write_all(b"\x1b[K\r\n")?;
        }
        o.flush()
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        let mut o = std::io::stdout();
        let _ = o.write_all(b"\x1b[?25h\x1b[?1049l");
        let _ = o.flush();
        // SAFETY: the attributes read at enter, put back.
        unsafe { libc::tcsetattr(IN, libc::TCSAFLUSH, &self.saved) };
    }
}
