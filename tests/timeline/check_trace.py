#!/usr/bin/env python3
"""An independent reader of a Chrome trace-event JSON file (the JSON Object
Format of the Trace Event Format), as wcexport --trace writes it: checks
the format's rules and measures each thread track's slices.

    check_trace.py TRACE.json [THREAD_NAME...]

Prints one JSON object: per thread track (by its thread_name, the comm
before the tid) the number of slices, where the first begins and the last
ends, the total of gaps and of overlaps between consecutive slices (ns),
ns per slice name; for each THREAD_NAME given (or prefix of a track name: GPU), also its slices as
[name, start_ns, dur_ns, stack] lists. Exits non-zero naming the first
event that breaks a rule."""
import json
import sys
from decimal import Decimal


def ns(v):
    # ts and dur are µs; three decimals carry the ns exactly.
    return int(Decimal(str(v)) * 1000)


def main():
    path, wanted = sys.argv[1], set(sys.argv[2:])
    with open(path) as f:
        doc = json.load(f, parse_float=Decimal)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        sys.exit("not the JSON Object Format: no traceEvents array")
    names, procs, tracks = {}, {}, {}
    for i, e in enumerate(doc["traceEvents"]):
        ph = e.get("ph")
        if ph not in ("X", "M"):
            sys.exit(f"event {i}: phase {ph!r}, expected X or M")
        if not isinstance(e.get("pid"), int) or not isinstance(e.get("tid"), int):
            sys.exit(f"event {i}: pid and tid must be integers: {e}")
        if ph == "M":
            if e.get("name") == "thread_name":
                names[(e["pid"], e["tid"])] = e["args"]["name"]
            elif e.get("name") == "process_name":
                procs[e["pid"]] = e["args"]["name"]
            continue
        if not isinstance(e.get("name"), str) or "ts" not in e or "dur" not in e:
            sys.exit(f"event {i}: a complete event needs name, ts and dur: {e}")
        ts, dur = ns(e["ts"]), ns(e["dur"])
        if ts < 0 or dur < 0:
            sys.exit(f"event {i}: negative ts or dur: {e}")
        stack = e.get("args", {}).get("stack", [])
        tracks.setdefault((e["pid"], e["tid"]), []).append((ts, dur, e["name"], stack))
    out = {"processes": {str(p): n for p, n in procs.items()}, "threads": {},
           "metadata": doc.get("metadata", {}).get("wallclock", {})}
    for key, sl in tracks.items():
        if key not in names:
            sys.exit(f"track {key} has no thread_name")
        if key[0] not in procs:
            sys.exit(f"process {key[0]} has no process_name")
        sl.sort()
        gaps = overlaps = 0
        for (t0, d0, _, _), (t1, _, _, _) in zip(sl, sl[1:]):
            end = t0 + d0
            if t1 > end:
                gaps += t1 - end
            elif t1 < end:
                overlaps += end - t1
        by_name = {}
        for ts, dur, n, _ in sl:
            by_name[n] = by_name.get(n, 0) + dur
        name = names[key].rsplit(" ", 1)[0]
        t = {"pid": key[0], "tid": key[1], "slices": len(sl), "first_ns": sl[0][0],
             "end_ns": sl[-1][0] + sl[-1][1], "gaps_ns": gaps, "overlaps_ns": overlaps, "ns": by_name}
        if name in wanted or any(name.startswith(w + " ") for w in wanted):
            t["list"] = [[n, ts, dur, st] for ts, dur, n, st in sl]
        out["threads"][f"{name} {key[1]}"] = t
    json.dump(out, sys.stdout)


main()
