"""A training loop in a thread over driver.cpp's extension (torch's shape
without torch): forward (a bound function returning a new object),
backward (a deep C++ stack that calls a Python hook), and every few
steps a lazy import through a module __getattr__ (PEP 562) of another
copy of the extension, each in a package of its own (pNN/driver...so:
one base name, many files). Prints the thread's native id.

usage: python3 train.py SECONDS TIDFILE PACKAGES_DIR COPIES
"""
import importlib
import sys
import threading
import time

here = sys.argv[3]
sys.path.insert(0, here)

import p0.driver as core  # noqa: E402


class Lazy:
    """A module-like object whose attributes are imported on first use."""

    def __init__(self, copies):
        self.copies, self.k = copies, 0

    def __getattr__(self, name):
        m = importlib.import_module("p%d.%s" % (self.k % self.copies, name))
        self.k += 1
        return m


def hook(t):
    return t.sum(4)


def forward(w, x):
    return core.matmul(w, x)


def backward(y):
    return core.backward(hook, y, 24)


def train(secs, copies):
    lazy = Lazy(copies)
    w, x = core.Tensor(20000), core.Tensor(20000)
    end = time.monotonic() + secs
    k = 0
    while time.monotonic() < end:
        backward(forward(w, x))
        if k % 4 == 0:
            lazy.driver
        k += 1


def main():
    secs, tidfile, copies = float(sys.argv[1]), sys.argv[2], int(sys.argv[4])
    t = threading.Thread(target=train, args=(secs, copies), name="train")
    t.start()
    while t.native_id is None:
        time.sleep(0.001)
    with open(tidfile, "w") as f:
        f.write(str(t.native_id))
    t.join()


main()
