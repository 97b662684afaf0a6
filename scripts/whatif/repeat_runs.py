#!/usr/bin/env python3
"""Repeats ground-truth runs to learn whether the real allocator's answer is repeatable: each named
run of truth.json (WORKLOAD__SETTING__CAP, as `make_ground_truth.py` names them) is run again
REPEATS times, each in a fresh process, first JOBS at a time (as the ground truth was made, so the
GPU is shared the same way), then one at a time (an otherwise idle GPU).

Usage: python3 repeat_runs.py TRUTH_JSON OUTDIR [--parallel N] [--jobs J] [--sequential M]
           [--sequential-prefix WORKLOAD] NAME...
(N repeats JOBS at a time, default 5 and 12; M repeats one at a time, default 1, of the names that
start with one of the --sequential-prefix values, default all)

OUTDIR gets runs/<phase>/<NAME>__r<i>.{json,pickle}, summary.json (per name and phase: the peaks,
OOM verdicts and allocations before the OOM of every repeat) and repeats.tar.xz with all of it.
"""
import argparse
import concurrent.futures as futures
import json
import os
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20


def run(outdir, phase, name, record, index):
    prefix = os.path.join(outdir, "runs", phase, f"{name}__r{index}")
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if record["conf"]:
        env["PYTORCH_CUDA_ALLOC_CONF"] = record["conf"]
    done = subprocess.run(
        [sys.executable, os.path.join(HERE, "run_case.py"), record["workload"], str(record["cap_bytes"] or 0),
         str(record.get("scale", 1.0)), prefix],
        env=env, capture_output=True, text=True, timeout=180,
    )
    if done.returncode != 0 or not os.path.exists(prefix + ".json"):
        print(f"FAILED {phase} {name} r{index}: rc={done.returncode} {done.stderr[-2000:]}", flush=True)
        return name, None
    with open(prefix + ".json") as f:
        result = json.load(f)
    print(f"{phase} {name} r{index}: oom={result['oom']} peak={result['reserved_peak_bytes'] / MiB:.1f}MiB "
          f"allocs_before_oom={result['allocs_before_oom']}", flush=True)
    return name, result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("truth")
    parser.add_argument("outdir")
    parser.add_argument("names", nargs="+")
    parser.add_argument("--parallel", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--sequential", type=int, default=1)
    parser.add_argument("--sequential-prefix", action="append", default=[])
    args = parser.parse_args()
    truth_path, outdir, names = args.truth, args.outdir, args.names
    with open(truth_path) as f:
        truth = json.load(f)
    missing = [n for n in names if n not in truth]
    if missing:
        sys.exit(f"not in {truth_path}: {missing}")
    summary = {}
    sequential_names = [n for n in names if not args.sequential_prefix
                        or any(n.startswith(p) for p in args.sequential_prefix)]
    phases = (("parallel", args.jobs, args.parallel, names), ("sequential", 1, args.sequential, sequential_names))
    for phase, workers, repeats, phase_names in phases:
        os.makedirs(os.path.join(outdir, "runs", phase), exist_ok=True)
        plan = [(n, i) for i in range(repeats) for n in phase_names]
        started = time.time()
        with futures.ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(lambda p: run(outdir, phase, p[0], truth[p[0]], p[1]), plan))
        print(f"phase {phase}: {len(plan)} runs in {time.time() - started:.0f} s", flush=True)
        for name, result in results:
            entry = summary.setdefault(name, {"ground_truth": {k: truth[name][k] for k in (
                "oom", "reserved_peak_bytes", "allocs_before_oom")}})
            entry.setdefault(phase, []).append(None if result is None else {
                k: result[k] for k in ("oom", "reserved_peak_bytes", "allocated_peak_bytes", "allocs_before_oom",
                                       "num_alloc_retries", "num_device_alloc", "num_device_free")})
    with open(os.path.join(outdir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    for name, entry in summary.items():
        for phase in ("parallel", "sequential"):
            if phase not in entry:
                continue
            peaks = sorted({r["reserved_peak_bytes"] // MiB for r in entry[phase] if r})
            ooms = [r["oom"] for r in entry[phase] if r]
            print(f"{name} {phase}: peaks MiB {peaks} oom {sum(ooms)}/{len(ooms)} "
                  f"(ground truth {entry['ground_truth']['reserved_peak_bytes'] // MiB} MiB oom {entry['ground_truth']['oom']})")
    with tarfile.open(os.path.join(outdir, "repeats.tar.xz"), "w:xz") as tar:
        tar.add(os.path.join(outdir, "summary.json"), arcname="summary.json")
        tar.add(os.path.join(outdir, "runs"), arcname="runs")


if __name__ == "__main__":
    main()
