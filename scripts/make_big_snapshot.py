#!/usr/bin/env python3
"""Builds a large allocator snapshot for benchmarks by repeating a real trace with shifted times.

Usage: python3 scripts/make_big_snapshot.py SOURCE.pickle OUT.pickle [MIN_MB]

Each repetition copies every trace event with time_us moved past the previous repetition; the
frame lists stay shared objects, so the pickle memo shares them exactly as PyTorch's own dumps
do (which is what keeps real files compact). Segments are those of the source. Written with the
default protocol, like torch.cuda.memory._dump_snapshot().
"""
import os
import pickle
import sys

source, out = sys.argv[1], sys.argv[2]
min_bytes = int(float(sys.argv[3]) if len(sys.argv) > 3 else 260) * 1_000_000

with open(source, "rb") as f:
    snapshot = pickle.load(f)

trace = snapshot["device_traces"][0]
times = [e["time_us"] for e in trace if "time_us" in e]
span = (max(times) - min(times) + 1000) if times else 1000



def repeated(repeats):
    events = []
    for r in range(repeats):
        shift = r * span
        for e in trace:
            copy = dict(e)
            if "time_us" in copy:
                copy["time_us"] = e["time_us"] + shift
            events.append(copy)
    return events


# Size of the first repetition and of each further one (shared frames are written once).
one = len(pickle.dumps(dict(snapshot, device_traces=[repeated(1)])))
two = len(pickle.dumps(dict(snapshot, device_traces=[repeated(2)])))
repeats = 1 + max(0, -(-(min_bytes - one) // max(two - one, 1)))
big = repeated(repeats)
snapshot["device_traces"] = [big] + snapshot["device_traces"][1:]
with open(out, "wb") as f:
    pickle.dump(snapshot, f)
print(f"{out}: {os.path.getsize(out) / 1e6:.1f} MB, {len(big)} trace events ({repeats} x {len(trace)})")
