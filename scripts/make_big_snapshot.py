#!/usr/bin/env python3
"""Builds a large allocator snapshot for benchmarks by repeating a real trace with shifted times.

Usage: python3 scripts/make_big_snapshot.py SOURCE.pickle OUT.pickle [MIN_MB] [--stream]

Each repetition copies every trace event with time_us moved past the previous repetition; the
frame lists stay shared objects, so the pickle memo shares them exactly as PyTorch's own dumps
do (which is what keeps real files compact). Segments are those of the source. Written with the
default protocol, like torch.cuda.memory._dump_snapshot().

--stream writes files bigger than this machine's memory (a 3 GB snapshot needs about 20 GB of
Python objects otherwise): protocol 2, the trace written one repetition at a time, each with a
fresh pickler, so frames are shared within a repetition and memo slots are reused from one
repetition to the next (legal pickle; the unpickler keeps the last value put at an index).
"""
import os
import pickle
import sys

args = [a for a in sys.argv[1:] if a != "--stream"]
stream = "--stream" in sys.argv[1:]
source, out = args[0], args[1]
min_bytes = int(float(args[2]) if len(args) > 2 else 260) * 1_000_000

with open(source, "rb") as f:
    snapshot = pickle.load(f)

trace = snapshot["device_traces"][0]
times = [e["time_us"] for e in trace if "time_us" in e]
span = (max(times) - min(times) + 1000) if times else 1000


def repetition(r):
    shift = r * span
    for e in trace:
        copy = dict(e)
        if "time_us" in copy:
            copy["time_us"] = e["time_us"] + shift
        yield copy


def body(obj, pickler, buffer):
    """obj pickled by pickler (protocol 2, memo kept between calls), without PROTO and STOP."""
    buffer.seek(0)
    buffer.truncate()
    pickler.dump(obj)
    return buffer.getvalue()[2:-1]


def write_streamed():
    import io
    rest = {k: v for k, v in snapshot.items() if k != "device_traces"}
    others = snapshot["device_traces"][1:]
    with open(out, "wb") as f:
        f.write(b"\x80\x02}")  # PROTO 2, EMPTY_DICT (the snapshot)
        for key, value in rest.items():
            buffer = io.BytesIO()
            pickler = pickle.Pickler(buffer, protocol=2)
            f.write(body(key, pickler, buffer) + body(value, pickler, buffer) + b"s")  # SETITEM
        f.write(pickle.dumps("device_traces", protocol=2)[2:-1])
        f.write(b"]]")  # EMPTY_LIST (traces per device), EMPTY_LIST (device 0's trace)
        r = 0
        events = 0
        while f.tell() < min_bytes:
            buffer = io.BytesIO()
            pickler = pickle.Pickler(buffer, protocol=2)
            for i, event in enumerate(repetition(r)):
                if i % 1000 == 0:  # batches of 1000, as pickle writes lists
                    f.write(b"e(" if i else b"(")  # APPENDS to device 0's trace, MARK
                f.write(body(event, pickler, buffer))
                events += 1
            f.write(b"e")
            r += 1
        f.write(b"a")  # APPEND device 0's trace to the traces
        if others:
            f.write(b"(" + b"".join(pickle.dumps(t, protocol=2)[2:-1] for t in others) + b"e")
        f.write(b"s.")  # SETITEM device_traces, STOP
    print(f"{out}: {os.path.getsize(out) / 1e6:.1f} MB, {events} trace events ({r} x {len(trace)}), streamed")


if stream:
    write_streamed()
    sys.exit(0)


def repeated(repeats):
    return [event for r in range(repeats) for event in repetition(r)]


# Size of the first repetition and of each further one (shared frames are written once).
one = len(pickle.dumps(dict(snapshot, device_traces=[repeated(1)])))
two = len(pickle.dumps(dict(snapshot, device_traces=[repeated(2)])))
repeats = 1 + max(0, -(-(min_bytes - one) // max(two - one, 1)))
big = repeated(repeats)
snapshot["device_traces"] = [big] + snapshot["device_traces"][1:]
with open(out, "wb") as f:
    pickle.dump(snapshot, f)
print(f"{out}: {os.path.getsize(out) / 1e6:.1f} MB, {len(big)} trace events ({repeats} x {len(trace)})")
