//! CLOCK_REALTIME for `--prepare`/`--activate` (see [`crate::when`]):
//! the instant the tool was launched, the realtime of a monotonic
//! instant, local time for messages.

pub use wallclock_stream::clocks::{clock_pair, monotonic_ns, realtime_ns};

/// CLOCK_REALTIME when the process started, taken by the loader's
/// initializers before `main`: +DURATION counts from there, not from
/// wherever the tool got round to reading its flags. Less the time the
/// process has so far run and waited for a CPU (/proc/self/schedstat,
/// counted from its fork): on a busy machine a new process can wait tens
/// of milliseconds before its first instruction, and that is part of the
/// launch's delay, not of the tool's. The reading comes before the
/// clock: taken after it, the time the reading's own syscalls ran (with
/// a tick or a switch among them) counted as before the clock, and the
/// launch came out before the fork: in 29 of 5,000 programs spawned
/// (posix_spawn) doing the same, by up to 0.34 ms before their parent's
/// clock read before the spawn; read first, in none of 8,000 (3,000 of
/// them beside two CPU hogs).
static LAUNCHED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn note_launch() {
    let since = since_fork().unwrap_or(0);
    let now = realtime_ns();
    LAUNCHED.store(now.saturating_sub(since), std::sync::atomic::Ordering::Relaxed);
}

/// On-CPU plus runqueue ns of this thread (the process's first), read
/// with plain calls: std is not set up yet.
fn since_fork() -> Option<u64> {
    let mut buf = [0u8; 128];
    // SAFETY: a NUL-terminated path, a buffer of the length given, the fd closed.
    let n = unsafe {
        let fd = libc::open(c"/proc/self/schedstat".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let n = libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len());
        libc::close(fd);
        n
    };
    let text = std::str::from_utf8(buf.get(..usize::try_from(n).ok()?)?).ok()?;
    let mut it = text.split_whitespace().map(|w| w.parse::<u64>().ok());
    Some(it.next()?? + it.next()??)
}

#[used]
#[link_section = ".init_array"]
static NOTE_LAUNCH: extern "C" fn() = note_launch;

/// The launch, when the initializer ran (always, in a tool's process).
pub fn launched() -> Option<u64> {
    match LAUNCHED.load(std::sync::atomic::Ordering::Relaxed) {
        0 => None,
        t => Some(t),
    }
}

/// The realtime ns of a CLOCK_MONOTONIC instant (both clocks are slewed
/// alike; only a step of the realtime clock in between moves this).
pub fn realtime_of(mono: u64) -> u64 {
    let (m, r) = clock_pair();
    (r as i128 - (m as i128 - mono as i128)).max(0) as u64
}

/// CLOCK_MONOTONIC ns of realtime `at`.
pub fn monotonic_of(at: u64) -> u64 {
    let (m, r) = clock_pair();
    (m as i128 + at as i128 - r as i128).max(0) as u64
}

/// Realtime ns as local `YYYY-MM-DD HH:MM:SS.mmm`, for messages.
pub fn local_time(real: u64) -> String {
    let secs = (real / 1_000_000_000) as libc::time_t;
    // SAFETY: plain data in and out of localtime_r.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&secs, &mut tm);
        tm
    };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        real % 1_000_000_000 / 1_000_000
    )
}
