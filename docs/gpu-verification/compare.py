"""Compares what vramscope recorded with what nvidia-smi logged over the same run.

usage: compare.py RESULTS_DIR [UTC_OFFSET like +0000]

RESULTS_DIR holds:
  smi-memory.csv            nvidia-smi --query-gpu=timestamp,memory.used,memory.reserved,memory.total --format=csv -lms 250
  smi-apps.csv              nvidia-smi --query-compute-apps=timestamp,pid,name,used_memory --format=csv -lms 250
  rec/vramscope-memory.csv  t_ms,device,used_bytes,reserved_bytes,free_bytes,total_bytes
  rec/vramscope-processes.csv t_ms,device,pid,name,kind,used_bytes

Each nvidia-smi row is paired with the vramscope sample nearest in time (at most half an
interval away); differences are reported in MiB (nvidia-smi prints whole MiB). Prints Markdown.
"""

import bisect
import csv
import datetime
import statistics
import sys
from collections import defaultdict

MIB = 1 << 20


def parse_smi_time(text, offset):
    local = datetime.datetime.strptime(text.strip(), "%Y/%m/%d %H:%M:%S.%f")
    sign = 1 if offset[0] == "+" else -1
    delta = datetime.timedelta(hours=int(offset[1:3]), minutes=int(offset[3:5]))
    utc = local - sign * delta
    return int(utc.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000)


def mib(text):
    return int(text.strip().split()[0])


def read_smi_memory(path, offset):
    rows = []
    with open(path, newline="") as f:
        reader = csv.reader(f)
        next(reader)
        for row in reader:
            if len(row) < 4 or not row[0].strip()[:1].isdigit():
                continue
            rows.append((parse_smi_time(row[0], offset), mib(row[1]), mib(row[2]), mib(row[3])))
    return rows


def read_vramscope_memory(path, device=0):
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if int(row["device"]) == device:
                rows.append(
                    (
                        int(row["t_ms"]),
                        int(row["used_bytes"]) / MIB,
                        int(row["reserved_bytes"]) / MIB,
                        int(row["total_bytes"]) / MIB,
                    )
                )
    return rows


def nearest(times, t, max_gap_ms):
    i = bisect.bisect_left(times, t)
    best = None
    for j in (i - 1, i):
        if 0 <= j < len(times) and abs(times[j] - t) <= max_gap_ms:
            if best is None or abs(times[j] - t) < abs(times[best] - t):
                best = j
    return best


def compare_memory(smi, ours, max_gap_ms):
    times = [r[0] for r in ours]
    pairs = []
    for t, used, reserved, total in smi:
        j = nearest(times, t, max_gap_ms)
        if j is None:
            continue
        _, o_used, o_reserved, o_total = ours[j]
        # A sample is "steady" when vramscope saw the same value on both neighbours: no
        # allocation happened between the two tools' reads, so they must agree.
        steady = all(
            0 <= k < len(ours) and abs(ours[k][1] - o_used) < 1 for k in (j - 1, j + 1)
        )
        pairs.append((t, times[j] - t, used, o_used, reserved, o_reserved, total, o_total, steady))
    return pairs


def summarize_memory(pairs):
    lines = []
    diffs = [p[3] - p[2] for p in pairs]
    steady = [p for p in pairs if p[8]]
    steady_diffs = [p[3] - p[2] for p in steady]
    reserved_diffs = [p[5] - p[4] for p in pairs]
    total_diffs = [p[7] - p[6] for p in pairs]
    gaps = [abs(p[1]) for p in pairs]
    lines.append(f"- paired samples: {len(pairs)} (time gap median {statistics.median(gaps):.0f} ms, max {max(gaps)} ms)")
    lines.append(
        f"- used, all pairs: |vramscope − nvidia-smi| median {statistics.median(map(abs, diffs)):.2f} MiB, "
        f"max {max(map(abs, diffs)):.2f} MiB; within 1 MiB: {sum(abs(d) < 1 for d in diffs)}/{len(diffs)}"
    )
    if steady_diffs:
        lines.append(
            f"- used, steady pairs (no change around the sample): {len(steady_diffs)} pairs, max |diff| "
            f"{max(map(abs, steady_diffs)):.2f} MiB; within 1 MiB: {sum(abs(d) < 1 for d in steady_diffs)}/{len(steady_diffs)}"
        )
    lines.append(f"- reserved: max |diff| {max(map(abs, reserved_diffs)):.2f} MiB")
    lines.append(f"- total: max |diff| {max(map(abs, total_diffs)):.2f} MiB")
    big = [p for p in pairs if abs(p[3] - p[2]) >= 1]
    if big:
        lines.append("- pairs differing by ≥ 1 MiB (steady = no: the memory changed between the two tools' reads):")
        lines.append("")
        lines.append("  | nvidia-smi time (ms) | gap (ms) | nvidia-smi used MiB | vramscope used MiB | steady |")
        lines.append("  |---|---|---|---|---|")
        for p in big[:20]:
            lines.append(f"  | {p[0]} | {p[1]:+d} | {p[2]} | {p[3]:.2f} | {'yes' if p[8] else 'no'} |")
        if len(big) > 20:
            lines.append(f"  | … {len(big) - 20} more | | | | |")
    return lines


def read_smi_apps(path, offset):
    rows = []
    with open(path, newline="") as f:
        reader = csv.reader(f)
        next(reader, None)
        for row in reader:
            if len(row) < 4 or not row[0].strip()[:1].isdigit():
                continue
            rows.append((parse_smi_time(row[0], offset), int(row[1]), row[2].strip(), mib(row[3])))
    return rows


def read_vramscope_processes(path):
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            used = row["used_bytes"]
            rows.append((int(row["t_ms"]), int(row["pid"]), row["name"], int(used) / MIB if used else None))
    return rows


def summarize_processes(smi_apps, ours, max_gap_ms):
    lines = []
    smi_by_pid = defaultdict(list)
    for t, pid, name, used in smi_apps:
        smi_by_pid[pid].append((t, name, used))
    ours_by_pid = defaultdict(list)
    for t, pid, name, used in ours:
        ours_by_pid[pid].append((t, name, used))
    lines.append("| pid | nvidia-smi name | vramscope name | nvidia-smi rows | vramscope rows | peak MiB (smi / vramscope) | paired rows within 1 MiB |")
    lines.append("|---|---|---|---|---|---|---|")
    for pid in sorted(set(smi_by_pid) | set(ours_by_pid)):
        s = smi_by_pid.get(pid, [])
        o = ours_by_pid.get(pid, [])
        o_times = [r[0] for r in o]
        paired = within = 0
        for t, _, used in s:
            j = nearest(o_times, t, max_gap_ms)
            if j is not None and o[j][2] is not None:
                paired += 1
                within += abs(o[j][2] - used) < 1
        s_peak = max((r[2] for r in s), default=None)
        o_peak = max((r[2] for r in o if r[2] is not None), default=None)
        lines.append(
            f"| {pid} | {s[0][1] if s else '—'} | {o[0][1] if o else '—'} | {len(s)} | {len(o)} | "
            f"{s_peak} / {o_peak if o_peak is None else f'{o_peak:.0f}'} | {within}/{paired} |"
        )
    return lines


def main():
    directory = sys.argv[1]
    offset = sys.argv[2] if len(sys.argv) > 2 else "+0000"
    max_gap_ms = 125
    smi = read_smi_memory(f"{directory}/smi-memory.csv", offset)
    ours = read_vramscope_memory(f"{directory}/rec/vramscope-memory.csv")
    print(f"nvidia-smi memory rows: {len(smi)}; vramscope memory rows: {len(ours)}")
    print()
    print("\n".join(summarize_memory(compare_memory(smi, ours, max_gap_ms))))
    print()
    apps = read_smi_apps(f"{directory}/smi-apps.csv", offset)
    procs = read_vramscope_processes(f"{directory}/rec/vramscope-processes.csv")
    print("\n".join(summarize_processes(apps, procs, max_gap_ms)))


if __name__ == "__main__":
    main()
