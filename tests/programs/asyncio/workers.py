"""Issue 31's asyncio program: 20 tasks (named worker-0..19) loop
`await fetch()` (an asyncio.sleep of 50 ms) then `await parse()` (2 ms of
CPU), for SECS seconds. Each task times its own awaits (CLOCK_MONOTONIC
around the sleep) and its parsing (its thread's CPU clock), and the totals
are written as JSON to OUT at the end: the ground truth the task view of
the capture is compared with.

    python3 workers.py SECS OUT
"""

import asyncio
import json
import sys
import time

N = 20
SECS = float(sys.argv[1])
OUT = sys.argv[2]
fetch_s = [0.0] * N
parse_cpu = [0.0] * N
rounds = [0] * N


async def fetch(i):
    t = time.monotonic()
    await asyncio.sleep(0.05)
    fetch_s[i] += time.monotonic() - t


async def parse(i):
    t = time.thread_time()
    x = 0
    while time.thread_time() - t < 0.002:
        for k in range(500):
            x += k * k
    parse_cpu[i] += time.thread_time() - t
    return x


async def worker(i, until):
    while time.monotonic() < until:
        await fetch(i)
        await parse(i)
        rounds[i] += 1


async def main():
    t0 = time.monotonic()
    until = t0 + SECS
    tasks = [asyncio.create_task(worker(i, until), name=f"worker-{i}") for i in range(N)]
    await asyncio.gather(*tasks)
    truth = {
        "tasks": N,
        "wall_s": time.monotonic() - t0,
        "fetch_s": sum(fetch_s),
        "parse_cpu_s": sum(parse_cpu),
        "rounds": sum(rounds),
    }
    with open(OUT, "w") as f:
        json.dump(truth, f)


asyncio.run(main())
