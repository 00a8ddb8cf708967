"""For tests/dump.rs: Python threads in known places. The main thread
sleeps in nap(); "cruncher" computes in crunch(); "sorter" sorts with a
key function that sleeps, so its Python frames run in two calls of the
interpreter with C code (sorted) between them. Prints `ready` once each
thread is in place."""
import sys
import threading
import time

started = threading.Barrier(3)


def crunch():
    started.wait()
    x = 0
    while True:
        x += 1


def slow_key(v):
    time.sleep(3600)
    return v


def sorter():
    started.wait()
    sorted([2, 1], key=slow_key)


def nap():
    time.sleep(3600)


threading.Thread(target=crunch, name="cruncher", daemon=True).start()
threading.Thread(target=sorter, name="sorter", daemon=True).start()
started.wait()
time.sleep(0.2)
print("ready", flush=True)
nap()
