#!/usr/bin/env python3
"""Summarises placement_survey.py's output: for each workload, how often two runs agree on the
order of two segments (made by the same events), for small (<= 32 MiB) and large segments, and
how many segments sit at the same address relative to the first segment in every run.

Usage: python3 placement_survey_summary.py survey.json
"""
import itertools
import json
import sys

MiB = 1 << 20


def main():
    with open(sys.argv[1]) as f:
        survey = json.load(f)
    print("| workload | runs | segments | same relative address in every run | pairs of small segments in the same order | pairs with a large one in the same order |")
    print("|---|---:|---:|---:|---:|---:|")
    for workload, phases in survey.items():
        runs = [r["segments"] for r in phases["alone"] + phases["side_by_side"] if "segments" in r]
        # Only runs that made the same segments (same events and sizes) as the first.
        key = [(i, size) for i, size, _ in runs[0]]
        runs = [r for r in runs if [(i, size) for i, size, _ in r] == key]
        n = len(key)
        same_address = sum(1 for k in range(n) if len({r[k][2] for r in runs}) == 1)
        agree = {"small": [0, 0], "large": [0, 0]}
        for a, b in itertools.combinations(range(n), 2):
            kind = "small" if key[a][1] <= 32 * MiB and key[b][1] <= 32 * MiB else "large"
            for r1, r2 in itertools.combinations(runs, 2):
                agree[kind][1] += 1
                agree[kind][0] += (r1[a][2] < r1[b][2]) == (r2[a][2] < r2[b][2])
        cell = lambda k: f"{100 * agree[k][0] / agree[k][1]:.0f} % of {agree[k][1]}" if agree[k][1] else "–"
        print(f"| {workload} | {len(runs)} | {n} | {same_address} | {cell('small')} | {cell('large')} |")


if __name__ == "__main__":
    main()
