"""Ground truth for the Python tests (tests/python.rs): threads that each do
one kind of work in one leaf function and measure it themselves, with
time.thread_time() (its CPU) and time.perf_counter() (its wall time).

usage: python3 workload.py SECONDS TRUTH.jsonl [GO_FILE]

Phase 1 (SECONDS): pure-Python computation (crunch), time.sleep (nap),
file writes with os.fsync (write_sync), a threading.Lock that another
thread holds while it sleeps (wait_lock; holder: hold_lock). Phase 2
(SECONDS): two CPU-bound threads fighting for the GIL (spin).

Each line of TRUTH is one leaf function of one thread: its native tid, the
chain of Python functions from the thread's first (threading's
Thread._bootstrap) down to it, and the CPU and wall nanoseconds it
measured, and of those the nanoseconds it spent runnable, waiting for a
CPU (so wall - cpu - runq is the time it was blocked: for `spin`, waiting
for the GIL), read around the wall clock (runq_ns) and inside it
(runq_in_ns): the run delay of the wall window lies between the two. With
GO_FILE, the work waits until that
file exists (so a profiler can attach first)."""

import ctypes
import json
import os
import sys
import tempfile
import threading
import time

SECONDS = float(sys.argv[1])
TRUTH = sys.argv[2]
GO = sys.argv[3] if len(sys.argv) > 3 else None
lock = threading.Lock()
stop = threading.Event()
results = []
results_lock = threading.Lock()


def chain_here():
    """Python functions on this thread's stack, outermost first, as the
    interpreter names them (qualified where it has qualified names)."""
    names = []
    f = sys._getframe(1)
    while f:
        names.append(getattr(f.f_code, "co_qualname", f.f_code.co_name))
        f = f.f_back
    return names[::-1]


def measured(leaf, *args):
    """Call leaf(*args) until `stop`, summing its own CPU and wall time."""
    chain = chain_here()
    cpu = wall = 0.0
    runq = 0
    calls = 0
    sched = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    buf = ctypes.create_string_buffer(128)
    runq_in = 0
    while not stop.is_set():
        q0 = waited(sched, buf)
        # The wall clock (vDSO) read just around the call; the CPU clock
        # (a system call, where the thread can be preempted) outside it.
        # The run delay is read on both sides of the wall clock: no read
        # is atomic with another, and after each C call the interpreter
        # may hand the GIL over (and wait to take it back, blocked then
        # runnable), so the run delay of the wall window lies between the
        # inner and the outer reads' (runq_in_ns <= it <= runq_ns).
        c0 = time.thread_time()
        w0 = time.perf_counter()
        i0 = waited(sched, buf)
        leaf(*args)
        i1 = waited(sched, buf)
        w1 = time.perf_counter()
        c1 = time.thread_time()
        cpu += c1 - c0
        wall += w1 - w0
        runq += waited(sched, buf) - q0
        runq_in += i1 - i0
        calls += 1
    os.close(sched)
    with results_lock:
        results.append({"tid": threading.get_native_id(), "thread": threading.current_thread().name,
                        "func": leaf.__name__, "chain": chain + [leaf.__name__],
                        "cpu_ns": int(cpu * 1e9), "wall_ns": int(wall * 1e9), "runq_ns": runq,
                        "runq_in_ns": runq_in, "calls": calls})


# libc called holding the GIL (PyDLL): os.pread would let it go, and
# waiting to take it back would land inside the measured window.
libc = ctypes.PyDLL(None)
libc.pread.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_long]


def waited(fd, buf):
    """Nanoseconds this thread has waited for a CPU (runnable), from the
    second field of its /proc schedstat: what is off-CPU but not blocked.
    (`buf` is the thread's own: another could run between the read and
    the parse.)"""
    n = libc.pread(fd, buf, 127, 0)
    return int(buf.raw[:n].split()[1])


def crunch():
    # About 8 ms of work per call: each call's edges (the clock and
    # schedstat reads around it: system calls on these VMs, where a thread
    # whose slice is up is preempted) count to the call by its clocks but
    # sit outside crunch() in a profile; with 1.5 ms calls that read its
    # on-CPU share up to 3 points high under CI's load.
    s = 0
    for i in range(100000):
        s += i * i % 7
    return s


def nap():
    time.sleep(0.002)


def write_sync(f):
    f.write(b"x" * 4096)
    f.flush()
    os.fsync(f.fileno())


def wait_lock():
    lock.acquire()
    lock.release()
    time.sleep(0.0005)


def hold_lock():
    with lock:
        time.sleep(0.02)
    time.sleep(0.0005)


def spin():
    # Twice crunch's work per call, for the same reason (fighting for the
    # GIL, these threads are preempted at the edges often; fewer edges
    # keep that from blurring the GIL wait measured against the profile).
    s = 0
    for i in range(200000):
        s += i * i % 7
    return s


def run_compute():
    measured(crunch)


def run_sleep():
    measured(nap)


def run_write():
    with tempfile.TemporaryFile(dir=os.path.dirname(os.path.abspath(TRUTH))) as f:
        measured(write_sync, f)


def run_wait():
    measured(wait_lock)


def run_hold():
    while not stop.is_set():
        hold_lock()


def run_spin():
    measured(spin)


def phase(targets):
    """Run `targets` in threads for SECONDS."""
    stop.clear()
    threads = [threading.Thread(target=t, name=t.__name__) for t in targets]
    for t in threads:
        t.start()
    time.sleep(SECONDS)
    stop.set()
    for t in threads:
        t.join()


def main():
    if GO:
        while not os.path.exists(GO):
            time.sleep(0.01)
    phase([run_compute, run_sleep, run_write, run_wait, run_hold])
    phase([run_spin, run_spin])
    with open(TRUTH, "w") as out:
        for r in results:
            out.write(json.dumps(r) + "\n")


main()
