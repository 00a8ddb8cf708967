"""The demo's Python part: a small service whose threads each wait in a
different way, profiled by scripts/demo/run with Debian's python3 and no
flag (wallclock reads the interpreter's own frames).

    python3 app.py SECONDS DIR

- handle_requests: pure-Python work (on-CPU)
- poll_upstream: time.sleep between short checks (off-CPU, sleeping)
- write_journal: appends with os.fsync (off-CPU, I/O)
- update_cache / rebuild_index: one threading.Lock, held for long
  stretches by rebuild_index (update_cache waits on it)
- score_a / score_b: two CPU-bound threads fighting for the GIL (each
  waits for the GIL about half its time: [GIL] in the graph)

At the end it prints, per thread, the CPU and wall time it measured
itself, to compare with the profile."""

import os
import sys
import threading
import time

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
DIR = sys.argv[2] if len(sys.argv) > 2 else "."
stop = threading.Event()
lock = threading.Lock()
report = []


def work(n):
    s = 0
    for i in range(n):
        s += i * i % 7
    return s


def handle_requests():
    while not stop.is_set():
        work(20000)
        time.sleep(0.004)


def poll_upstream():
    while not stop.is_set():
        time.sleep(0.05)
        work(2000)


def write_journal():
    with open(os.path.join(DIR, "journal.dat"), "ab") as f:
        while not stop.is_set():
            f.write(b"x" * 8192)
            f.flush()
            os.fsync(f.fileno())
            time.sleep(0.01)


def rebuild_index():
    while not stop.is_set():
        with lock:
            time.sleep(0.04)
        time.sleep(0.005)


def update_cache():
    while not stop.is_set():
        with lock:
            work(1000)


def score_a():
    while not stop.is_set():
        work(100000)


def score_b():
    while not stop.is_set():
        work(100000)


def measured(fn):
    def run():
        c, w = time.thread_time(), time.perf_counter()
        fn()
        c, w = time.thread_time() - c, time.perf_counter() - w
        report.append((threading.current_thread().name, fn.__name__, c, w))
    return run


def main():
    fns = [handle_requests, poll_upstream, write_journal, rebuild_index, update_cache, score_a, score_b]
    threads = [threading.Thread(target=measured(f), name=f.__name__) for f in fns]
    for t in threads:
        t.start()
    time.sleep(SECONDS)
    stop.set()
    for t in threads:
        t.join()
    print(f"{'thread':16} {'cpu':>8} {'wall':>8}  off-CPU (by its own clocks)")
    for name, fn, c, w in sorted(report):
        print(f"{fn:16} {c:7.2f}s {w:7.2f}s  {100 * (w - c) / w:5.1f}%")


if __name__ == "__main__":
    main()
