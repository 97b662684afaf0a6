#!/usr/bin/env python3
"""Small hand-made allocator snapshots (PyTorch's `_snapshot()` format) that pin down one rule of
the what-if replay each; `tests/all/whatif_replay.rs` uses them. Deterministic: run it again and
the files come out the same.

Usage: python3 scripts/whatif/make_rule_fixtures.py tests/fixtures/whatif/rules
"""
import os
import pickle
import sys

MiB = 1 << 20
FRAMES = [{"name": "rule_fixture", "filename": "make_rule_fixtures.py", "line": 1}]
SETTINGS = {
    "PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
    "expandable_segments": False,
    "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)},
}


def event(action, addr, size):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 0,
            "compile_context": "N/A", "user_metadata": "", "frames": FRAMES}


def segment(address, blocks):
    """blocks: (size, allocated) in address order."""
    out, cursor = [], address
    for size, allocated in blocks:
        out.append({"address": cursor, "size": size, "requested_size": size if allocated else 0,
                    "state": "active_allocated" if allocated else "inactive", "frames": FRAMES})
        cursor += size
    total = sum(size for size, _ in blocks)
    used = sum(size for size, allocated in blocks if allocated)
    return {"device": 0, "address": address, "total_size": total, "allocated_size": used,
            "active_size": used, "requested_size": used, "stream": 0, "segment_type": "large",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": out}


def driver_address_sequence():
    """Default settings: a 36 MiB segment (high address) serves a 30 MiB request by splitting,
    then two more 30 MiB requests get their own segments at low addresses. Under
    max_split_size_mb:32 the 36 MiB block is oversize and the first 30 MiB request needs a
    segment of its own too: the replay gives it the address the real run's first 30 MiB
    segment got."""
    high, low1, low2 = 0x7F0000000000, 0x7E0000000000, 0x7E0004000000
    trace = [
        event("segment_alloc", high, 36 * MiB),
        event("alloc", high, 36 * MiB),
        event("free_requested", high, 36 * MiB),
        event("free_completed", high, 36 * MiB),
        event("alloc", high, 30 * MiB),
        event("segment_alloc", low1, 30 * MiB),
        event("alloc", low1, 30 * MiB),
        event("segment_alloc", low2, 30 * MiB),
        event("alloc", low2, 30 * MiB),
    ]
    segments = [
        segment(low1, [(30 * MiB, True)]),
        segment(low2, [(30 * MiB, True)]),
        segment(high, [(30 * MiB, True), (6 * MiB, False)]),
    ]
    return {"segments": segments, "device_traces": [trace], "allocator_settings": SETTINGS,
            "external_annotations": []}


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "driver_address_sequence.pickle"), "wb") as f:
        pickle.dump(driver_address_sequence(), f, protocol=4)


if __name__ == "__main__":
    main()
