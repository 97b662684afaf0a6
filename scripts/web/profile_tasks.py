#!/usr/bin/env python3
"""What the long tasks of a web-viewer opening spent their time in.

    node scripts/web/open_check.cjs --dist DIST --list-tasks --cpu-profile /tmp/NAME.cpuprofile \
        FILE > /tmp/check.json
    python3 scripts/web/profile_tasks.py /tmp/check.json /tmp/FILE_NAME.cpuprofile [MIN_MS] [TOP]

The check's JSON line gives each long task's start (ms after the drop) and duration; the profile
(V8's sampling profiler, Chrome DevTools' .cpuprofile format) has a 20 ms busy function
`__mark_drop` run just before the drop. This prints, for each long task of at least MIN_MS
(default 80), the functions its samples were in: self time (the innermost frame) and the
app-level frames seen on the stack (inclusive).
"""
import json
import sys
from collections import Counter


def main():
    check = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
    profile = json.load(open(sys.argv[2]))
    min_ms = float(sys.argv[3]) if len(sys.argv) > 3 else 80.0
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 15

    nodes = {n["id"]: n for n in profile["nodes"]}
    parent = {}
    for n in profile["nodes"]:
        for child in n.get("children", []):
            parent[child] = n["id"]

    def name(node_id):
        frame = nodes[node_id]["callFrame"]
        return frame["functionName"] or f"({frame['url'].rsplit('/', 1)[-1] or 'anonymous'})"

    times = []
    t = profile["startTime"]
    for delta in profile["timeDeltas"]:
        t += delta
        times.append(t)
    samples = profile["samples"]
    mark = [times[i] for i, s in enumerate(samples) if name(s) == "__mark_drop"]
    if not mark:
        sys.exit("no __mark_drop samples: was the check run with --cpu-profile?")
    dropped_us = mark[-1]

    tasks = check.get("tasks_after_drop") or []
    for start_ms, duration_ms in tasks:
        if duration_ms < min_ms:
            continue
        lo = dropped_us + start_ms * 1000
        hi = lo + duration_ms * 1000
        own = Counter()
        inclusive = Counter()
        count = 0
        for i, s in enumerate(samples):
            if not lo <= times[i] <= hi:
                continue
            count += 1
            own[name(s)] += 1
            seen = set()
            node = s
            while node in parent:
                label = name(node)
                if label not in seen:
                    seen.add(label)
                    inclusive[label] += 1
                node = parent[node]
        ms_per_sample = duration_ms / count if count else 0
        print(f"== task at {start_ms} ms, {duration_ms} ms, {count} samples")
        print("  self:")
        for label, c in own.most_common(top):
            print(f"    {c * ms_per_sample:7.1f} ms  {label}")
        print("  on the stack:")
        for label, c in inclusive.most_common(top * 2):
            print(f"    {c * ms_per_sample:7.1f} ms  {label}")


if __name__ == "__main__":
    main()
