//! Per-thread accounting rules that several tools must apply the same way:
//! the role string of a thread (used in file names by `flame --per-thread`,
//! `wcreport --split-dir` and in `stackmerge`'s thread records), the scaling
//! of on-CPU samples to exact on-CPU time, and the behaviour class.

use crate::record::{Frame, Kind, Stack, State, StateNs, Thread};

/// Role of a thread, safe in a file name (`[a-z0-9_]`, never empty):
/// `main` for the main thread (tid == pid); else the producer's role when it
/// set one; else a role from the thread name (`worker`, `pool`, `io`, `gc`,
/// `timer`, `net`, `log`), else the name itself, lowercased, its trailing
/// numbers dropped (`pt_main_thread`, `python3` -> `python`).
pub fn role_for(t: &Thread) -> String {
    if t.tid != 0 && t.tid == t.pid {
        return "main".to_string();
    }
    if let Some(r) = t.role.as_deref() {
        let r = file_safe(r);
        if !r.is_empty() {
            return r;
        }
    }
    role_from_name(&t.comm)
}

/// The role a thread name suggests.
pub fn role_from_name(comm: &str) -> String {
    let n = comm.to_ascii_lowercase();
    const TABLE: &[(&[&str], &str)] = &[
        (&["pool", "rayon", "threadpool", "tp-"], "pool"),
        (&["worker", "wrk", "work"], "worker"),
        (&["aio", "disk", "flush", "fsync", "writer", "reader", "io-", "io_", "-io", "_io", "jbd2", "kworker"], "io"),
        (&["gc", "finaliz"], "gc"),
        (&["timer", "tick", "cron"], "timer"),
        (&["net", "http", "epoll", "accept", "listen", "socket", "rpc", "grpc"], "net"),
        (&["log"], "log"),
    ];
    if n == "io" {
        return "io".to_string();
    }
    for (pats, role) in TABLE {
        if pats.iter().any(|p| n.contains(p)) {
            return role.to_string();
        }
    }
    let base = n.trim_end_matches(|c: char| c.is_ascii_digit() || matches!(c, '-' | '_' | '.' | ':' | '/' | ' '));
    let r = file_safe(base);
    if r.is_empty() {
        "thread".to_string()
    } else {
        r
    }
}

/// `[a-z0-9_]` only, at most 32 characters, no leading/trailing `_`.
fn file_safe(s: &str) -> String {
    let mut out: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).take(32).collect();
    while out.ends_with('_') {
        out.pop();
    }
    out.trim_start_matches('_').to_string()
}

/// width(stack) = on_ns(thread) x samples(stack) / samples(thread), rounded
/// to the nearest ns without overflow.
pub fn scale_samples(on_ns: u64, samples: u64, thread_samples: u64) -> u64 {
    if thread_samples == 0 {
        return 0;
    }
    let t = thread_samples as u128;
    ((on_ns as u128 * samples as u128 + t / 2) / t) as u64
}

/// ns of `samples` taken at `freq_hz`, rounded to the nearest ns.
pub fn samples_to_ns(samples: u64, freq_hz: u64) -> u64 {
    if freq_hz == 0 {
        return 0;
    }
    let f = freq_hz as u128;
    ((samples as u128 * 1_000_000_000 + f / 2) / f) as u64
}

/// The leaf a stack's kind adds below its frames: the off-CPU state
/// (`[sleep]`...), or for GPU work what ran (the kernel's name, under the
/// stack that launched it). An off-CPU stack's object, when it has one,
/// comes after it ([`object_frame`]).
pub fn kind_leaf(s: &Stack) -> Option<String> {
    match s.kind {
        Kind::Off => s.state.map(|st| st.leaf_name().to_string()),
        Kind::Gpu => s.gpu.as_ref().and_then(|g| g.name.clone()).filter(|n| !n.is_empty()),
        _ => None,
    }
}

/// The frame an off-CPU stack's object (`Stack::object`) becomes, right
/// after its state leaf: `[file /var/log/app.log]`, `[lock g_lock]`.
pub fn object_frame(obj: &str) -> String {
    format!("[{obj}]")
}

/// The object named by the last of `funcs` (an off-CPU stack's frames,
/// root first): a bracketed frame right after a state leaf; its text
/// without the brackets.
pub fn object_of<'a>(funcs: &[&'a str]) -> Option<&'a str> {
    match funcs {
        [.., leaf, obj] if crate::State::from_leaf_name(leaf).is_some() && obj.len() > 2 && obj.starts_with('[') && obj.ends_with(']') => {
            Some(&obj[1..obj.len() - 1])
        }
        _ => None,
    }
}

/// Whether `funcs` (root first) end in a state leaf, alone or followed by
/// the frame of its object.
pub fn ends_in_state_leaf(funcs: &[&str]) -> bool {
    funcs.last().is_some_and(|f| crate::State::from_leaf_name(f).is_some()) || object_of(funcs).is_some()
}

/// The state a stack's frames end in (see [`ends_in_state_leaf`]).
pub fn state_leaf_of(funcs: &[&str]) -> Option<crate::State> {
    let n = funcs.len() - usize::from(object_of(funcs).is_some());
    funcs.get(n.checked_sub(1)?).and_then(|f| crate::State::from_leaf_name(f))
}

/// Fold a second record of the same (pid, tid) into `into`. The record
/// that carries the exact accounting (`off_ns`, from the switch tracer)
/// gives the life and `on_ns`: on + off were measured over that interval,
/// and another tool's slightly shifted window must not stretch it (which
/// would show coverage under 100% for time nobody measured). Otherwise the
/// life is the union and the first value known of each measure wins.
pub fn merge_thread(into: &mut Thread, t: &Thread) {
    if into.comm.is_empty() {
        into.comm = t.comm.clone();
    }
    into.role = into.role.take().or_else(|| t.role.clone());
    into.samples = into.samples.or(t.samples);
    match (into.off_ns.is_some(), t.off_ns.is_some()) {
        (false, true) => {
            into.start_ns = t.start_ns.or(into.start_ns);
            into.end_ns = t.end_ns.or(into.end_ns);
            if t.on_ns.is_some() {
                (into.on_ns, into.steal_ns) = (t.on_ns, t.steal_ns);
            }
            into.off_ns = t.off_ns;
        }
        (true, false) => {
            into.start_ns = into.start_ns.or(t.start_ns);
            into.end_ns = into.end_ns.or(t.end_ns);
            if into.on_ns.is_none() {
                (into.on_ns, into.steal_ns) = (t.on_ns, t.steal_ns);
            }
        }
        _ => {
            into.start_ns = match (into.start_ns, t.start_ns) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            into.end_ns = match (into.end_ns, t.end_ns) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            if into.on_ns.is_none() {
                (into.on_ns, into.steal_ns) = (t.on_ns, t.steal_ns);
            }
        }
    }
}

/// The on-CPU time a thread's samples stand for: `on_ns` less its steal
/// (the hypervisor's time on the vCPU, in which no sample is taken).
pub fn sampled_on_ns(t: &Thread) -> Option<u64> {
    Some(t.on_ns?.saturating_sub(t.steal_ns.unwrap_or(0)))
}

/// The name of the frame that stands for a thread's steal.
pub const STEAL_FRAME: &str = "[steal]";

/// The on-CPU stack that shows a thread's steal: one `[steal]` frame (where
/// in the code it fell is not known), `count` 0 (not samples).
pub fn steal_stack(t: &Thread) -> Option<Stack> {
    let ns = t.steal_ns.filter(|n| *n > 0)?;
    let mut s = Stack::new(Kind::On, t.pid, t.tid, &t.comm);
    s.frames = vec![Frame::named(STEAL_FRAME)];
    s.ns = ns;
    s.pgen = t.pgen;
    Some(s)
}

/// The frame stacksym puts above CPython's `take_gil` in blocked off-CPU
/// stacks: the thread waits for the interpreter's lock, not its own.
pub const GIL_FRAME: &str = "[GIL]";

/// What a thread mostly did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Behaviour {
    CpuBound,
    IoBound,
    LockWaiting,
    GilWaiting,
    Sleeping,
    RunnableStarved,
    Idle,
}

impl Behaviour {
    pub fn name(self) -> &'static str {
        match self {
            Behaviour::CpuBound => "cpu-bound",
            Behaviour::IoBound => "io-bound",
            Behaviour::LockWaiting => "lock-waiting",
            Behaviour::GilWaiting => "gil-waiting",
            Behaviour::Sleeping => "sleeping",
            Behaviour::RunnableStarved => "runnable-starved",
            Behaviour::Idle => "idle",
        }
    }
}

/// What an off-CPU stack waits for, from its frame names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// CPython's GIL (a `[GIL]` frame), whatever lock waits under it.
    Gil,
    /// A lock another thread holds (a mutex, a monitor, a rwlock).
    Lock,
    Io,
    Sleep,
    Poll,
    /// A condition: a futex, condition variable, semaphore or parker that
    /// no lock frame calls: a pool's worker waiting for work, a thread
    /// waiting for another to finish (classed idle, not lock-waiting).
    Condition,
    Unknown,
}

/// Taking a lock: the callers that make a futex wait a lock wait. Matched
/// in lower case, anywhere in the name.
const LOCK: &[&str] = &[
    "pthread_mutex_lock",
    "pthread_mutex_timedlock",
    "pthread_mutex_clocklock",
    "pthread_mutex_cond_lock",
    "__lll_lock",
    "lll_lock",
    "pthread_rwlock_rdlock",
    "pthread_rwlock_wrlock",
    "pthread_rwlock_timed",
    "pthread_rwlock_clock",
    "pthread_spin_lock",
    "futex_lock_pi",
    // The kernel's: mutex_lock, rwsem_down_read_slowpath, rt_mutex_*.
    "mutex_lock",
    "rwsem_down",
    "rt_mutex",
    // HotSpot: a contended `synchronized`, its VM mutexes.
    "complete_monitor_locking",
    "objectmonitor::enter",
    "objectsynchronizer::enter",
    "monitor::lock",
    // HotSpot's Mutex::lock, Rust std's futex Mutex::lock_contended,
    // parking_lot's RawMutex::lock_slow, RwLock read/write.
    "mutex::lock",
    "rwlock::read",
    "rwlock::write",
    "rawrwlock::lock",
    // Go's runtime locks (runtime.lock2 -> runtime.futexsleep).
    "runtime.lock",
    // CPython's threading.Lock.acquire (unless a waiting call above it:
    // see PY_WAITS).
    "pythread_acquire_lock",
];
/// Waiting for a condition, when no LOCK frame calls it.
const CONDITION: &[&str] = &[
    "futex",
    "pthread_cond",
    "pthread_barrier",
    "pthread_join",
    "sem_wait",
    "sem_timedwait",
    "sem_clockwait",
    "condvar",
    "parking_lot",
    "parker::park",
    "platformevent::park",
    "platformparker",
    "uv_cond_wait",
    "uv_sem_wait",
    // Go's scheduler: an M with nothing to run sleeps on its note.
    "runtime.notesleep",
    "runtime.notetsleep",
    "runtime.stopm",
];
/// CPython calls that wait on a lock used as a signal, not as a lock:
/// `Condition.wait`, `Event.wait`, `Queue.get` (a pool's idle worker),
/// `Thread.join`.
const PY_WAITS: &[&str] = &[
    "py::condition.wait",
    "py::event.wait",
    "py::queue.get",
    "py::simplequeue.get",
    "py::thread.join",
    "py::thread._wait_for_tstate_lock",
    "py::barrier.wait",
    "py::semaphore.acquire",
    "py::_worker:",
];
const IO: &[&str] = &[
    "fsync",
    "fdatasync",
    "sync_file",
    "pread",
    "pwrite",
    "vfs_read",
    "vfs_write",
    "ksys_read",
    "ksys_write",
    "io_schedule",
    "blk_",
    "bio_",
    "submit_bio",
    "ext4_",
    "xfs_",
    "btrfs_",
    "nfs_",
    "io_uring",
    "aio_",
    "wait_on_page",
    "folio_wait",
    "filemap_",
    "__x64_sys_read",
    "__x64_sys_write",
];
/// A sleep: the C library's and the kernel's, the JVM's `Thread.sleep`
/// (JVM_Sleep, over a condition wait), Python's time.sleep (over clock_nanosleep).
const SLEEP: &[&str] =
    &["nanosleep", "usleep", "sleep", "hrtimer_nanosleep", "do_nanosleep", "jvm_sleep", "thread.sleep"];
const POLL: &[&str] =
    &["epoll_wait", "epoll_pwait", "do_epoll", "poll", "select", "accept", "recv", "sigtimedwait", "pause"];

/// Classify an off-CPU stack by its frames. The rule, in order:
///
/// 1. a `[GIL]` frame: the interpreter's lock;
/// 2. a LOCK frame anywhere (`pthread_mutex_lock -> __lll_lock_wait ->
///    futex_wait`, `complete_monitor_locking_C -> ObjectMonitor::enter`,
///    the kernel's `mutex_lock`): waiting for a lock another thread holds.
///    CPython's `PyThread_acquire_lock` counts only without a PY_WAITS
///    caller (an `Event.wait` or a `Queue.get` waits on a lock as a signal);
/// 3. an I/O frame anywhere;
/// 4. the innermost sleep or poll frame (`JVM_Sleep` over its condition
///    wait is a sleep);
/// 5. a condition (a futex, condition variable, semaphore, parker) with no
///    caller above: a pool's worker idling (Go's `runtime.notesleep`,
///    libuv's `uv_cond_wait`, a Rust or Java pool's park);
/// 6. else unknown.
pub fn wait_of(frames: &[Frame]) -> Wait {
    if frames.iter().any(|f| f.func == GIL_FRAME) {
        return Wait::Gil;
    }
    let names: Vec<String> = frames.iter().rev().map(|f| f.func.to_ascii_lowercase()).collect();
    let any = |list: &[&str], n: &str| list.iter().any(|p| n.contains(p));
    let py_signal = names.iter().any(|n| any(PY_WAITS, n));
    let (mut io, mut sleep_or_poll, mut condition) = (false, None, false);
    for n in &names {
        if any(LOCK, n) {
            if !(py_signal && n.contains("pythread_acquire_lock")) {
                return Wait::Lock;
            }
            condition = true;
        } else if any(CONDITION, n) {
            condition = true;
        } else if any(IO, n) {
            io = true;
        } else if any(SLEEP, n) {
            sleep_or_poll = sleep_or_poll.or(Some(Wait::Sleep));
        } else if any(POLL, n) {
            sleep_or_poll = sleep_or_poll.or(Some(Wait::Poll));
        }
    }
    if io {
        Wait::Io
    } else if let Some(w) = sleep_or_poll {
        w
    } else if condition {
        Wait::Condition
    } else {
        Wait::Unknown
    }
}

/// Behaviour of a thread from its exact split (`on_ns`, `off` by state)
/// and its off-CPU stacks (which say what the S time waited for). The
/// largest share wins: on-CPU -> cpu-bound, R -> runnable-starved,
/// D and S-in-I/O -> io-bound, S-in-a-lock -> lock-waiting, S-under-[GIL]
/// -> gil-waiting, S-in-sleep ->
/// sleeping, S-in-poll, S-in-a-condition (see [`wait_of`]) and state other
/// -> idle. A thread that used under 1%
/// of `alive_ns` and waited only in poll or in unknown places is idle.
pub fn behaviour(on_ns: u64, off: &StateNs, alive_ns: u64, off_stacks: &[&Stack]) -> Behaviour {
    let total = on_ns + off.total();
    if total == 0 {
        return Behaviour::Idle;
    }
    // Split the S time in proportion to the S stacks' reasons.
    let mut by_wait = [0u64; 6]; // lock, io, sleep, poll, unknown, GIL
    for s in off_stacks {
        if s.state.unwrap_or(State::S) != State::S {
            continue;
        }
        let i = match wait_of(&s.frames) {
            Wait::Lock => 0,
            Wait::Io => 1,
            Wait::Sleep => 2,
            Wait::Poll | Wait::Condition => 3,
            Wait::Unknown => 4,
            Wait::Gil => 5,
        };
        by_wait[i] += s.ns;
    }
    let s_total: u64 = by_wait.iter().sum();
    let share = |i: usize| -> u64 {
        if s_total == 0 {
            if i == 4 {
                off.s
            } else {
                0
            }
        } else {
            ((off.s as u128 * by_wait[i] as u128) / s_total as u128) as u64
        }
    };
    let candidates = [
        (on_ns, Behaviour::CpuBound),
        (off.r, Behaviour::RunnableStarved),
        (off.d + share(1), Behaviour::IoBound),
        (share(0), Behaviour::LockWaiting),
        (share(5), Behaviour::GilWaiting),
        (share(2) + share(4), Behaviour::Sleeping),
        (share(3) + off.other, Behaviour::Idle),
    ];
    let best = candidates.iter().max_by_key(|(v, _)| *v).map(|c| c.1).unwrap_or(Behaviour::Idle);
    let busy = on_ns + off.r + off.d + share(0) + share(1) + share(5);
    if alive_ns > 0 && (busy as u128) * 100 < alive_ns as u128 && matches!(best, Behaviour::Sleeping | Behaviour::Idle)
    {
        return Behaviour::Idle;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn th(pid: u32, tid: u32, comm: &str) -> Thread {
        Thread::new(pid, tid, comm)
    }

    #[test]
    fn roles() {
        assert_eq!(role_for(&th(10, 10, "anything")), "main");
        assert_eq!(role_for(&th(10, 11, "worker-3")), "worker");
        assert_eq!(role_for(&th(10, 12, "ThreadPool-7")), "pool");
        assert_eq!(role_for(&th(10, 13, "io")), "io");
        assert_eq!(role_for(&th(10, 14, "python3")), "python");
        assert_eq!(role_for(&th(10, 15, "a b/c")), "a_b_c");
        assert_eq!(role_for(&th(10, 16, "1234")), "thread");
        let mut t = th(10, 17, "x");
        t.role = Some("My Role!".into());
        assert_eq!(role_for(&t), "my_role");
    }

    #[test]
    fn exact_accounting_gives_the_life() {
        let mut sampled = th(1, 2, "w");
        (sampled.start_ns, sampled.end_ns, sampled.on_ns, sampled.samples) = (Some(130), Some(1030), Some(5), Some(9));
        let mut exact = th(1, 2, "w");
        (exact.start_ns, exact.end_ns, exact.on_ns) = (Some(100), Some(1000), Some(400));
        exact.off_ns = Some(StateNs { s: 500, ..Default::default() });
        for (a, b) in [(&sampled, &exact), (&exact, &sampled)] {
            let mut m = a.clone();
            merge_thread(&mut m, b);
            assert_eq!((m.start_ns, m.end_ns, m.on_ns, m.samples), (Some(100), Some(1000), Some(400), Some(9)));
            assert_eq!(m.off_ns.unwrap().s, 500);
        }
    }

    #[test]
    fn scaling() {
        assert_eq!(scale_samples(1_000, 1, 3), 333);
        assert_eq!(scale_samples(1_000, 2, 3), 667);
        assert_eq!(scale_samples(u64::MAX, 1, 1), u64::MAX);
        assert_eq!(samples_to_ns(49, 49), 1_000_000_000);
        assert_eq!(samples_to_ns(1, 49), 20_408_163);
    }

    #[test]
    fn classes() {
        let mut lock = Stack::new(crate::Kind::Off, 1, 2, "w");
        lock.state = Some(State::S);
        lock.frames = ["main", "pthread_mutex_lock", "futex_wait"].map(Frame::named).to_vec();
        lock.ns = 900;
        let off = StateNs { s: 900, ..Default::default() };
        assert_eq!(behaviour(100, &off, 1000, &[&lock]), Behaviour::LockWaiting);
        // The same futex wait under [GIL]: the interpreter's lock.
        let mut gil = lock.clone();
        gil.frames = ["py::work", "[GIL]", "take_gil", "pthread_cond_timedwait", "futex_wait"].map(Frame::named).to_vec();
        assert_eq!(wait_of(&gil.frames), Wait::Gil);
        assert_eq!(behaviour(100, &off, 1000, &[&gil]), Behaviour::GilWaiting);
        assert_eq!(Behaviour::GilWaiting.name(), "gil-waiting");
        assert_eq!(behaviour(900, &StateNs { s: 100, ..Default::default() }, 1000, &[&lock]), Behaviour::CpuBound);
        assert_eq!(behaviour(0, &StateNs::default(), 1000, &[]), Behaviour::Idle);
        assert_eq!(behaviour(0, &StateNs { d: 10, s: 5, ..Default::default() }, 15, &[]), Behaviour::IoBound);
    }

    fn waits(frames: &str) -> Wait {
        wait_of(&frames.split(';').map(Frame::named).collect::<Vec<_>>())
    }

    /// Stacks as the tools show them (root first), each class by the
    /// callers of its futex wait.
    #[test]
    fn a_futex_is_a_lock_wait_only_under_a_lock() {
        // glibc's contended mutex; HotSpot's contended `synchronized`.
        assert_eq!(waits("clone3;start_thread;worker;pthread_mutex_lock;__lll_lock_wait;syscall;futex_wait;schedule"), Wait::Lock);
        assert_eq!(
            waits("clone3;start_thread;thread_native_entry;JavaThread::run;void Main.locker();complete_monitor_locking_C;ObjectMonitor::enter;ObjectMonitor::EnterI;PlatformEvent::park;__futex_abstimed_wait_common;futex_wait"),
            Wait::Lock
        );
        assert_eq!(waits("clone3;start_thread;std::sys::sync::mutex::futex::Mutex::lock_contended;syscall;futex_wait"), Wait::Lock);
        // The kernel's own mutex.
        assert_eq!(waits("main;write;ksys_write;pipe_write;__mutex_lock.constprop.0;schedule"), Wait::Lock);
        // Go's runtime threads with nothing to run, parked on their note.
        assert_eq!(
            waits("runtime.mstart;runtime.mstart0;runtime.mstart1;runtime.schedule;runtime.findRunnable;runtime.stopm;runtime.mPark;runtime.notesleep;runtime.futexsleep;runtime.futex;futex_wait"),
            Wait::Condition
        );
        assert_eq!(waits("runtime.main;runtime.lock2;runtime.futexsleep;runtime.futex;futex_wait"), Wait::Lock);
        // libuv's pool workers waiting for work, V8's platform workers and
        // the inspector's thread, as captured from Debian's Node 20 here
        // (offcputime | stacksym; all 11 threads were idle, none lock-waiting).
        let k = "entry_SYSCALL_64_after_hwframe;do_syscall_64;__x64_sys_futex;do_futex;futex_wait;__futex_wait;futex_do_wait;schedule;__schedule";
        for user in [
            "clone3;start_thread;worker;uv_cond_wait;___pthread_cond_wait;__pthread_cond_wait_common;__futex_abstimed_wait_common;__futex_abstimed_wait_common64",
            "clone3;start_thread;node::(anonymous namespace)::PlatformWorkerThread(void*);uv_cond_wait;___pthread_cond_wait;__pthread_cond_wait_common;__futex_abstimed_wait_common;__futex_abstimed_wait_common64",
            "clone3;start_thread;node::inspector::(anonymous namespace)::StartIoThreadMain(void*);uv_sem_wait;uv__sem_wait;__new_sem_wait_slow64;__futex_abstimed_wait_common;__futex_abstimed_wait_common64",
        ] {
            assert_eq!(waits(&format!("{user};{k}")), Wait::Condition, "{user}");
        }
        // The JVM's Thread.sleep is a sleep, over a condition wait.
        assert_eq!(
            waits("clone3;start_thread;void Main.sleeper();JVM_Sleep;JavaThread::sleep_nanos;PlatformEvent::park_nanos;___pthread_cond_timedwait64;__futex_abstimed_wait_common;futex_wait"),
            Wait::Sleep
        );
        // A Python pool's idle worker waits on a lock used as a signal.
        assert_eq!(
            waits("clone3;py::Thread._bootstrap:/usr/lib/python3.11/threading.py;py::_worker:/usr/lib/python3.11/concurrent/futures/thread.py;_queue_SimpleQueue_get_impl;PyThread_acquire_lock_timed;sem_clockwait;futex_wait"),
            Wait::Condition
        );
        assert_eq!(waits("clone3;py::work:/a.py;lock_PyThread_acquire_lock;PyThread_acquire_lock_timed;sem_clockwait;futex_wait"), Wait::Lock);
        assert_eq!(waits("main;pthread_join;__futex_abstimed_wait_common;futex_wait"), Wait::Condition);
        assert_eq!(waits("main;uv_run;uv__io_poll;epoll_wait;do_epoll_wait"), Wait::Poll);
    }

    /// An idle pool worker is idle, not lock-waiting.
    #[test]
    fn idle_pool_worker_is_idle() {
        let mut s = Stack::new(crate::Kind::Off, 1, 2, "libuv-worker");
        s.state = Some(State::S);
        s.frames = ["clone3", "start_thread", "worker", "uv_cond_wait", "pthread_cond_wait", "futex_wait"].map(Frame::named).to_vec();
        s.ns = 1000;
        let off = StateNs { s: 1000, ..Default::default() };
        assert_eq!(behaviour(0, &off, 1000, &[&s]), Behaviour::Idle);
    }
}
