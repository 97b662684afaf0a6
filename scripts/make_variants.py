#!/usr/bin/env python3
"""Writes format variants of a real snapshot, so vramscope is tested on every pickle protocol,
the TorchScript writer, JSON and the older format vintages (docs/sources.md, "Format vintages")
with the allocator state, and so the memory_stats() truth, of a real H200 run.

Usage: python3 scripts/make_variants.py tests/fixtures/pytorch/frag_oom.pickle
Writes BASE.v-NAME.pickle / BASE.v-json.snapshot.json next to it; then run
scripts/snapshot_expect.py on them.
"""
import copy
import json
import pickle
import struct
import sys


class TorchScriptStylePickler:
    """Mimics torch/csrc/jit/serialization/pickler.cpp with tag_aggregates=false: PROTO 2, no
    FRAME, strings as BINUNICODE memoized by value, unbatched MARK...APPENDS/SETITEMS, ints as
    BININT1/BININT2/BININT/LONG1(8), shared containers memoized after they are complete."""

    def __init__(self):
        self.out = bytearray(b"\x80\x02")
        self.strings = {}
        self.shared = {}
        self.next_memo = 0

    def put(self):
        i = self.next_memo
        self.next_memo += 1
        self.out += b"q" + bytes([i]) if i < 256 else b"r" + struct.pack("<I", i)
        return i

    def get(self, i):
        self.out += b"h" + bytes([i]) if i < 256 else b"j" + struct.pack("<I", i)

    def dump(self, obj):
        self.value(obj)
        self.out += b"."
        return bytes(self.out)

    def value(self, v):
        if isinstance(v, (list, dict)) and id(v) in self.shared:
            self.get(self.shared[id(v)])
            return
        if v is None:
            self.out += b"N"
        elif v is True:
            self.out += b"\x88"
        elif v is False:
            self.out += b"\x89"
        elif isinstance(v, int):
            if 0 <= v < 256:
                self.out += b"K" + bytes([v])
            elif 0 <= v < 65536:
                self.out += b"M" + struct.pack("<H", v)
            elif -(2**31) <= v < 2**31:
                self.out += b"J" + struct.pack("<i", v)
            else:
                self.out += b"\x8a\x08" + struct.pack("<q", v)
        elif isinstance(v, float):
            self.out += b"G" + struct.pack(">d", v)
        elif isinstance(v, str):
            if v in self.strings:
                self.get(self.strings[v])
            else:
                data = v.encode("utf-8", "surrogatepass")
                self.out += b"X" + struct.pack("<I", len(data)) + data
                self.strings[v] = self.put()
        elif isinstance(v, tuple):
            for item in v:
                self.value(item)
            self.out += {1: b"\x85", 2: b"\x86", 3: b"\x87"}[len(v)]
        elif isinstance(v, list):
            self.out += b"]("
            for item in v:
                self.value(item)
            self.out += b"e"
            self.shared[id(v)] = self.put()
        elif isinstance(v, dict):
            self.out += b"}("
            for k, item in v.items():
                self.value(k)
                self.value(item)
            self.out += b"u"
            self.shared[id(v)] = self.put()
        else:
            raise TypeError(type(v))


def pre_2_1(snapshot):
    """The 2022 / PyTorch 2.0 shape: blocks {size, state, history}, segments without
    requested_size / segment_pool_id / is_expandable / frames, traces without time_us."""
    s = copy.deepcopy(snapshot)
    for seg in s["segments"]:
        for key in ("requested_size", "segment_pool_id", "is_expandable", "frames"):
            seg.pop(key, None)
        blocks = []
        for b in seg["blocks"]:
            nb = {"size": b["size"], "state": b["state"]}
            if b["state"] != "inactive":
                nb["history"] = [{"addr": b["address"], "real_size": b["requested_size"],
                                  "frames": b.get("frames", [])}]
            blocks.append(nb)
        seg["blocks"] = blocks
    for trace in s["device_traces"]:
        for e in trace:
            for key in ("time_us", "compile_context", "user_metadata"):
                e.pop(key, None)
    s.pop("allocator_settings", None)
    s.pop("external_annotations", None)
    return s


def bare_2019(snapshot):
    """torch.cuda.memory_snapshot() of 2019: a list of segments whose blocks are {size, state}."""
    segs = copy.deepcopy(snapshot["segments"])
    for seg in segs:
        for key in ("requested_size", "segment_pool_id", "is_expandable", "frames"):
            seg.pop(key, None)
        seg["blocks"] = [{"size": b["size"], "state": b["state"]} for b in seg["blocks"]]
    return segs


def without_frames(snapshot):
    s = copy.deepcopy(snapshot)
    for seg in s["segments"]:
        seg["frames"] = []
        for b in seg["blocks"]:
            b["frames"] = []
    for trace in s["device_traces"]:
        for e in trace:
            e.pop("frames", None)
    return s


for path in sys.argv[1:]:
    base = path.rsplit(".", 1)[0]
    with open(path, "rb") as f:
        snap = pickle.load(f)
    for protocol in (0, 1, 2, 3, 5):
        with open(f"{base}.v-p{protocol}.pickle", "wb") as f:
            pickle.dump(snap, f, protocol=protocol)
    with open(f"{base}.v-torchscript.pickle", "wb") as f:
        f.write(TorchScriptStylePickler().dump(snap))
    with open(f"{base}.v-pre21.pickle", "wb") as f:
        pickle.dump(pre_2_1(snap), f, protocol=2)
    with open(f"{base}.v-bare.pickle", "wb") as f:
        pickle.dump(bare_2019(snap), f, protocol=2)
    with open(f"{base}.v-json.snapshot.json", "w") as f:
        json.dump(without_frames(snap), f)
    print("variants of", path)
