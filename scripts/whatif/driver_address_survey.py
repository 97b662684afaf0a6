#!/usr/bin/env python3
"""Where does the CUDA driver put a new caching-allocator segment? Measured on real snapshots.

Reads PyTorch allocator snapshots (`.pickle`, or `.tar.xz` archives of them), each counted once
(by content), and follows every device trace's `segment_alloc` / `segment_free` events:

1. Reuse of released address space: whenever a new segment is made while ranges freed by
   earlier `segment_free`s (adjacent ones merged, minus what later segments took) could hold
   it, did it go into one of them, and does one simple rule name its exact address?
2. Fresh address space: where a segment that went into no released range lies against the
   segments alive at that moment (below every one, between two, above every one).

Runs under `expandable_segments` are skipped: their addresses come from `cuMemAddressReserve`.
3. The driver's 32 MiB chunks: how often the chunk rule the replay uses names the address.

Usage: driver_address_survey.py PATH... (prints a report; used for `docs/whatif-validation.md`
and `src/analysis/replay/allocator.rs`).
"""
import collections
import hashlib
import io
import pickle
import sys
import tarfile

RULES = [
    (choose, end)
    for choose in ("smallest", "highest", "lowest", "latest-freed")
    for end in ("low end", "high end")
]
CHUNK = 32 << 20
CHUNK_RULE = "32 MiB chunks (else the smallest range that fits, at its low end)"


def snapshots(paths):
    """(name, bytes) of every snapshot in the arguments."""
    for path in paths:
        if path.endswith(".tar.xz"):
            with tarfile.open(path) as archive:
                for member in archive:
                    if member.isfile() and member.name.endswith(".pickle"):
                        yield member.name, archive.extractfile(member).read()
        elif path.endswith(".pickle"):
            with open(path, "rb") as f:
                yield path, f.read()


def merge(ranges, start, end, when):
    ranges.append([start, end, when])
    ranges.sort()
    merged = []
    for r in ranges:
        if merged and merged[-1][1] >= r[0]:
            merged[-1][1] = max(merged[-1][1], r[1])
            merged[-1][2] = max(merged[-1][2], r[2])
        else:
            merged.append(r)
    ranges[:] = merged


def take(ranges, start, end):
    kept = []
    for lo, hi, when in ranges:
        if start >= hi or end <= lo:
            kept.append([lo, hi, when])
            continue
        if lo < start:
            kept.append([lo, start, when])
        if end < hi:
            kept.append([end, hi, when])
    ranges[:] = kept


def rule_address(rule, fitting, size):
    choose, end = rule
    if choose == "smallest":
        r = min(fitting, key=lambda r: (r[1] - r[0], r[0]))
    elif choose == "highest":
        r = max(fitting, key=lambda r: r[1])
    elif choose == "lowest":
        r = min(fitting, key=lambda r: r[0])
    else:
        r = max(fitting, key=lambda r: r[2])
    return r[0] if end == "low end" else r[1] - size


def top_room(released, live, chunk):
    """The room at the top of `chunk` that no segment has held, when what segments held there
    (live or released) is one run from the chunk's bottom: the driver fills a chunk from its
    bottom, so memory of its own or another library's in the chunk would have left a gap."""
    end = chunk
    while end < chunk + CHUNK:
        covering = [hi for lo, hi, _ in released if lo <= end < hi]
        covering += [a + s for a, s in live.items() if a <= end < a + s]
        if not covering:
            break
        end = max(covering)
    if end == chunk or end >= chunk + CHUNK:
        return None
    chunk_end = chunk + CHUNK
    held_above = any(lo < chunk_end and hi > end for lo, hi, _ in released) or any(
        a < chunk_end and a + s > end for a, s in live.items()
    )
    return None if held_above else (end, chunk_end)


def chunk_rule_address(released, live, size):
    """The driver's 32 MiB chunks, as `src/analysis/replay/allocator.rs` (`place_by_chunks`)
    models them: a segment under 32 MiB goes into the lowest chunk that holds a live segment
    and has room (released, or above all a chunk's segments ever held when they held one run
    from its bottom), at the lowest address there; else, and for larger segments, at the
    start of the highest chunk of released space free of live segments; else the smallest
    released range that fits, at its low end."""
    def overlaps_live(start, end):
        return any(a < end and a + s > start for a, s in live.items())

    if size < CHUNK:
        chunks = sorted({a // CHUNK * CHUNK for a in live} | {(a + s - 1) // CHUNK * CHUNK for a, s in live.items()})
        for chunk in chunks:
            chunk_end = chunk + CHUNK
            pieces = sorted([max(lo, chunk), min(hi, chunk_end)] for lo, hi, _ in released if lo < chunk_end and hi > chunk)
            room = top_room(released, live, chunk)
            if room:
                if pieces and pieces[-1][1] == room[0]:
                    pieces[-1][1] = room[1]
                else:
                    pieces.append(list(room))
            for lo, hi in pieces:
                if hi - lo >= size:
                    return lo
    for lo, hi, _ in sorted(released, reverse=True):
        if hi - lo < size:
            continue
        at = (hi - size) // CHUNK * CHUNK
        while at >= lo:
            if not overlaps_live(at, -(-(at + size) // CHUNK) * CHUNK):
                return at
            at -= CHUNK
    return rule_address(("smallest", "low end"), [r for r in released if r[1] - r[0] >= size], size)


def main(paths):
    seen = set()
    runs = 0
    fits = into_released = 0
    exact = collections.Counter()
    fresh = collections.Counter()
    fresh_not_named = 0
    for name, data in snapshots(paths):
        digest = hashlib.sha256(data).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        snapshot = pickle.load(io.BytesIO(data))
        conf = (snapshot.get("allocator_settings") or {}).get("PYTORCH_CUDA_ALLOC_CONF") or ""
        if "expandable_segments:True" in conf.replace(" ", ""):
            continue
        runs += 1
        for trace in snapshot.get("device_traces", []):
            released, live = [], {}
            for when, event in enumerate(trace):
                action = event["action"]
                if action == "segment_free":
                    merge(released, event["addr"], event["addr"] + event["size"], when)
                    live.pop(event["addr"], None)
                elif action == "segment_alloc":
                    start, size = event["addr"], event["size"]
                    fitting = [r for r in released if r[1] - r[0] >= size]
                    inside = any(r[0] <= start and start + size <= r[1] for r in released)
                    if fitting:
                        fits += 1
                        into_released += inside
                        for rule in RULES:
                            exact[rule] += rule_address(rule, fitting, size) == start
                        named = chunk_rule_address(released, live, size) == start
                        exact[CHUNK_RULE] += named
                        fresh_not_named += not named and not inside
                    if live and not inside:
                        lowest = min(live)
                        highest = max(a + s for a, s in live.items())
                        fresh[
                            "below every live segment"
                            if start + size <= lowest
                            else "above every live segment"
                            if start >= highest
                            else "between live segments"
                        ] += 1
                    take(released, start, start + size)
                    live[start] = size
    print(f"{runs} real runs (distinct snapshots, expandable segments skipped)")
    print(
        f"new segments while a released range could hold them: {fits}; "
        f"put into a released range: {into_released}; into fresh address space: {fits - into_released}"
    )
    print("exact address named by each rule, of those", fits, "cases:")
    for rule in RULES:
        print(f"  {rule[0]} range that fits, at its {rule[1]}: {exact[rule]} ({100 * exact[rule] / max(fits, 1):.1f} %)")
    print(f"  {CHUNK_RULE}: {exact[CHUNK_RULE]} ({100 * exact[CHUNK_RULE] / max(fits, 1):.1f} %)")
    print(f"    of the {fits - exact[CHUNK_RULE]} it did not name, into fresh address space: {fresh_not_named}")
    total = sum(fresh.values())
    print(f"new segments outside released ranges, with live segments around: {total}")
    for where, count in fresh.most_common():
        print(f"  {where}: {count} ({100 * count / max(total, 1):.1f} %)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
