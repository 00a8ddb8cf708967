"""numpy matrix products in a thread: np.dot and the @ operator (OpenBLAS
dgemm, which splits the work with threads of its own), for the seconds
given. Prints the thread's native id, the one tests/runtime_numpy.rs
checks the stacks of.

usage: python3 matmul.py SECONDS TIDFILE
"""
import sys
import threading
import time

import numpy as np


def dot_product(a, b):
    return np.dot(a, b)


def at_product(a, b):
    return a @ b


def work(secs):
    rng = np.random.default_rng(1)
    a = rng.random((300, 300))
    b = rng.random((300, 300))
    end = time.monotonic() + secs
    while time.monotonic() < end:
        dot_product(a, b)
        at_product(a, b)


def main():
    secs, tidfile = float(sys.argv[1]), sys.argv[2]
    t = threading.Thread(target=work, args=(secs,), name="matmul")
    t.start()
    while t.native_id is None:
        time.sleep(0.001)
    with open(tidfile, "w") as f:
        f.write(str(t.native_id))
    t.join()


main()
