#!/usr/bin/env python3
"""Builds a large allocator snapshot for benchmarks by repeating a real trace with shifted times.

Usage: python3 scripts/make_big_snapshot.py SOURCE.pickle OUT.pickle [MIN_MB] [--stream | --consistent]

Each repetition copies every trace event with time_us moved past the previous repetition; the
frame lists stay shared objects, so the pickle memo shares them exactly as PyTorch's own dumps
do (which is what keeps real files compact). Segments are those of the source. Written with the
default protocol, like torch.cuda.memory._dump_snapshot().

--stream writes files bigger than this machine's memory (a 3 GB snapshot needs about 20 GB of
Python objects otherwise): protocol 2, the trace written one repetition at a time, each with a
fresh pickler, so frames are shared within a repetition and memo slots are reused from one
repetition to the next (legal pickle; the unpickler keeps the last value put at an index).

With --consistent (for the what-if replay bench) the result is a trace an allocator could have
written, so that it replays from start to end: each repetition's addresses move into a range of
their own, each repetition but the last ends by freeing what is still allocated and releasing
every segment as torch.cuda.empty_cache() would (its events carry an `empty_cache` frame, as
PyTorch's own do when stacks are recorded), and the segments are the last repetition's. The
source must be a trace that starts from an empty allocator.
"""
import os
import pickle
import sys

flags = ("--stream", "--consistent")
stream = "--stream" in sys.argv[1:]
consistent = "--consistent" in sys.argv[1:]
args = [a for a in sys.argv[1:] if a not in flags]
if stream and consistent:
    sys.exit("--stream and --consistent do not combine (a streamed file cannot end each repetition "
             "but the last with a cleanup: its last repetition is not known in advance)")
source, out = args[0], args[1]
min_bytes = int(float(args[2]) if len(args) > 2 else 260) * 1_000_000
# Each repetition's addresses move by this much (beyond any real trace's address span).
ADDRESS_SHIFT = 1 << 36

with open(source, "rb") as f:
    snapshot = pickle.load(f)

trace = snapshot["device_traces"][0]
times = [e["time_us"] for e in trace if "time_us" in e]
span = (max(times) - min(times) + 1000) if times else 1000


def repetition(r):
    shift = r * span
    address_shift = r * ADDRESS_SHIFT if consistent else 0
    for e in trace:
        copy = dict(e)
        if "time_us" in copy:
            copy["time_us"] = e["time_us"] + shift
        if address_shift and "addr" in copy and copy["action"] not in ("snapshot", "oom"):
            copy["addr"] = e["addr"] + address_shift
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


EMPTY_CACHE_FRAMES = [{"filename": "torch/cuda/memory.py", "line": 1, "name": "empty_cache"}]


def cleanup(shift, time_us):
    """Frees what the source leaves allocated and releases its segments (an empty_cache())."""
    events = []
    for segment in snapshot["segments"]:
        for block in segment["blocks"]:
            if block["state"] in ("active_allocated", "active_pending_free"):
                for action in ("free_requested", "free_completed"):
                    events.append({"action": action, "addr": block["address"] + shift,
                                   "size": block.get("requested_size", block["size"]),
                                   "stream": segment["stream"], "time_us": time_us})
    for segment in snapshot["segments"]:
        events.append({"action": "segment_free", "addr": segment["address"] + shift,
                       "size": segment["total_size"], "stream": segment["stream"],
                       "time_us": time_us, "frames": EMPTY_CACHE_FRAMES})
    return events


def repeated(repeats):
    events = []
    for r in range(repeats):
        events.extend(repetition(r))
        if consistent and r + 1 < repeats:
            events.extend(cleanup(r * ADDRESS_SHIFT, (max(times) if times else 0) + r * span + 1))
    return events


# Size of the first repetition and of each further one (shared frames are written once).
one = len(pickle.dumps(dict(snapshot, device_traces=[repeated(1)])))
two = len(pickle.dumps(dict(snapshot, device_traces=[repeated(2)])))
repeats = 1 + max(0, -(-(min_bytes - one) // max(two - one, 1)))
big = repeated(repeats)
if consistent:
    last_shift = (repeats - 1) * ADDRESS_SHIFT
    for segment in snapshot["segments"]:
        segment["address"] += last_shift
        for block in segment["blocks"]:
            if "address" in block:
                block["address"] += last_shift
snapshot["device_traces"] = [big] + snapshot["device_traces"][1:]
with open(out, "wb") as f:
    pickle.dump(snapshot, f)
print(f"{out}: {os.path.getsize(out) / 1e6:.1f} MB, {len(big)} trace events ({repeats} x {len(trace)})")
