#!/usr/bin/env python3
"""Writes NAME.expect.json next to each snapshot given: facts CPython's own pickle/json modules
read from the file (counts, sums, first and last events). vramscope's tests compare its reader
with these, so the Rust decoder is checked against the reference implementation.

Usage: python3 scripts/snapshot_expect.py tests/fixtures/pytorch/*.pickle
"""
import json
import pickle
import sys
from collections import Counter


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    if data.lstrip()[:1] in (b"{", b"["):
        return json.loads(data)
    return pickle.loads(data)


def facts(snapshot):
    if isinstance(snapshot, list):
        snapshot = {"segments": snapshot, "device_traces": []}
    segments = snapshot["segments"]
    blocks = [b for s in segments for b in s["blocks"]]
    traces = snapshot.get("device_traces", [])
    stacks = set()
    frames = set()
    def note(fs):
        key = tuple((f["filename"], f["line"], f["name"]) for f in fs)
        stacks.add(key)
        frames.update(key)
    for s in segments:
        note(s.get("frames", []))
        for b in s["blocks"]:
            note(b.get("frames", []))
            for h in b.get("history", []):
                note(h.get("frames", []))
    for t in traces:
        for e in t:
            note(e.get("frames", []))
    out = {
        "segment_count": len(segments),
        "block_count": len(blocks),
        "block_bytes": sum(b["size"] for b in blocks),
        "trace_lengths": [len(t) for t in traces],
        "actions": dict(Counter(e["action"] for t in traces for e in t)),
        "stack_count": len(stacks | {()}),
        "frame_count": len(frames),
        "annotation_count": len(snapshot.get("external_annotations", [])),
        "segment_addresses_sorted": sorted((s["device"], s["address"]) for s in segments)[:5],
    }
    events = [e for t in traces for e in t]
    if events:
        first, last = events[0], events[-1]
        out["first_event"] = {k: first.get(k) for k in ("action", "addr", "size", "stream", "time_us")}
        out["last_event"] = {k: last.get(k) for k in ("action", "addr", "size", "stream", "time_us")}
        out["size_sum"] = sum(e.get("size", 0) for e in events)
        out["oom_device_free"] = [e.get("device_free") for e in events if e["action"] == "oom"]
    return out


for path in sys.argv[1:]:
    base = path[: -len(".snapshot.json")] if path.endswith(".snapshot.json") else path.rsplit(".", 1)[0]
    with open(base + ".expect.json", "w") as f:
        json.dump(facts(load(path)), f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote", base + ".expect.json")
