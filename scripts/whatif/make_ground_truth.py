#!/usr/bin/env python3
"""Builds the what-if ground truth on an NVIDIA GPU: every workload of workloads.py under every
allocator setting, each in a fresh process, without a cap and under two caps chosen from the
uncapped runs (between the peak allocated and the default setting's peak reserved, so that some
settings fail and some survive).

Usage: python3 make_ground_truth.py OUTDIR [--smoke] [--jobs N] [--module MODULE]

--module runs the workloads of another module of this folder (e.g. `workloads_heldout`, the
held-out set) instead of workloads.py; --workloads A,B runs only those of the module.

OUTDIR gets runs/*.json (what PyTorch reported per run), runs/*.pickle (the snapshots),
summary.json, and archives for the trip home: gt_json.tar.xz (every record) and one
gt_<workload>.tar.xz per workload with its snapshots. Runs are independent processes, several at a time; a failed or hung run is
recorded as such and never stops the others.
"""
import concurrent.futures as futures
import importlib
import json
import os
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20

SETTINGS = [
    "",  # PyTorch's defaults
    "expandable_segments:True",
    "max_split_size_mb:64",
    "max_split_size_mb:512",
    "garbage_collection_threshold:0.6",
    "roundup_power2_divisions:4",
    "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
]


def tag(conf):
    if not conf:
        return "default"
    return "".join(c if c.isalnum() else "_" for c in conf).strip("_")


def log(message):
    print(time.strftime("%H:%M:%S"), message, flush=True)


def run_one(outdir, workload, conf, cap, scale):
    name = f"{workload}__{tag(conf)}__{'cap%d' % cap if cap else 'nocap'}"
    prefix = os.path.join(outdir, "runs", name)
    env = dict(os.environ)
    env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    if not conf:
        env.pop("PYTORCH_CUDA_ALLOC_CONF")
    started = time.time()
    try:
        done = subprocess.run(
            [sys.executable, os.path.join(HERE, "run_case.py"), workload, str(cap), str(scale), prefix],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        ok = done.returncode == 0 and os.path.exists(prefix + ".json")
        if not ok:
            with open(prefix + ".failed.txt", "w") as f:
                f.write(f"rc={done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-8000:]}\n")
    except subprocess.TimeoutExpired:
        ok = False
        with open(prefix + ".failed.txt", "w") as f:
            f.write("timeout after 120 s\n")
    record = None
    if ok:
        with open(prefix + ".json") as f:
            record = json.load(f)
    log(f"{'ok ' if ok else 'FAILED'} {name} {time.time() - started:.1f}s "
        + (f"oom={record['oom']} peak={record['reserved_peak_bytes'] / MiB:.0f}MiB" if record else ""))
    return name, record


def main():
    outdir = sys.argv[1]
    smoke = "--smoke" in sys.argv
    jobs = int(sys.argv[sys.argv.index("--jobs") + 1]) if "--jobs" in sys.argv else 12
    module = sys.argv[sys.argv.index("--module") + 1] if "--module" in sys.argv else "workloads"
    # run_case.py imports the same module.
    os.environ["VRAMSCOPE_WORKLOADS"] = module
    sys.path.insert(0, HERE)
    WORKLOADS = list(importlib.import_module(module).WORKLOADS)
    if "--workloads" in sys.argv:
        WORKLOADS = sys.argv[sys.argv.index("--workloads") + 1].split(",")
    scale = 0.15 if smoke else 1.0
    workloads = WORKLOADS[:] if not smoke else WORKLOADS
    settings = SETTINGS if not smoke else SETTINGS[:3]
    os.makedirs(os.path.join(outdir, "runs"), exist_ok=True)
    log(f"ground truth: {len(workloads)} workloads x {len(settings)} settings, scale {scale}, {jobs} at a time")
    results = {}
    with futures.ThreadPoolExecutor(jobs) as pool:
        # Phase 1: no cap.
        plan = [(w, c, 0) for w in workloads for c in settings]
        for name, record in pool.map(lambda p: run_one(outdir, p[0], p[1], p[2], scale), plan):
            results[name] = record
        # Phase 2: two caps per workload between the peak allocated and the default's peak reserved.
        plan = []
        for w in workloads:
            uncapped = [r for n, r in results.items() if r and n.startswith(w + "__") and n.endswith("nocap")]
            default = results.get(f"{w}__default__nocap")
            if not uncapped or not default:
                continue
            allocated = max(r["allocated_peak_bytes"] for r in uncapped)
            reserved = default["reserved_peak_bytes"]
            caps = sorted({
                (allocated + (reserved - allocated) // 2) // MiB * MiB,
                (allocated + (reserved - allocated) // 10) // MiB * MiB + 64 * MiB,
            })
            plan.extend((w, c, cap) for cap in caps for c in settings)
        for name, record in pool.map(lambda p: run_one(outdir, p[0], p[1], p[2], scale), plan):
            results[name] = record
    with open(os.path.join(outdir, "summary.json"), "w") as f:
        json.dump(results, f, indent=1)
    failed = [n for n, r in results.items() if r is None]
    log(f"done: {len(results)} runs, {len(failed)} failed {failed}")
    # Archives for the trip home.
    runs = os.path.join(outdir, "runs")
    names = sorted(os.listdir(runs))
    archives = {"gt_json.tar.xz": [n for n in names if not n.endswith(".pickle")]}
    for w in workloads:
        archives[f"gt_{w}.tar.xz"] = [n for n in names if n.endswith(".pickle") and n.startswith(w + "__")]
    for archive, members in archives.items():
        with tarfile.open(os.path.join(outdir, archive), "w:xz") as tar:
            tar.add(os.path.join(outdir, "summary.json"), arcname="summary.json")
            for member in members:
                tar.add(os.path.join(runs, member), arcname=member)
        log(f"{archive}: {len(members)} files, {os.path.getsize(os.path.join(outdir, archive)) / MiB:.1f} MiB")


if __name__ == "__main__":
    main()
