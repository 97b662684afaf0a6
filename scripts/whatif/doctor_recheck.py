#!/usr/bin/env python3
"""Checks the doctor's allocator advice against the real allocator, on an NVIDIA GPU.

For every run of a ground truth (make_ground_truth.py's OUTDIR) that ran out of memory, runs
`vramscope diagnose --snapshot RUN.pickle --json`, takes every allocator setting it recommends
as proven by replay, and runs the same workload for real under that setting and the same cap, in
a fresh process (run_case.py). A setting the ground truth already ran under that cap is not run
again: its recorded outcome is used.

Usage: python3 doctor_recheck.py GT_OUTDIR VRAMSCOPE_BINARY MODULE OUT.json [--jobs N]

OUT.json: one record per OOM run: its name, the diagnosis's primary finding, and per proven
setting (in the doctor's order) the real outcome and peak reserved. Snapshots of the re-runs are
deleted; their records stay in GT_OUTDIR/recheck/.
"""
import concurrent.futures as futures
import glob
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CONF_LINE = re.compile(r"PYTORCH_CUDA_ALLOC_CONF=(\S+)")


def tag(conf):
    return "".join(c if c.isalnum() else "_" for c in conf).strip("_") if conf else "default"


def diagnose(binary, pickle_path):
    """The proven allocator settings the doctor recommends, in its order, and its first finding."""
    done = subprocess.run(
        [binary, "diagnose", "--snapshot", pickle_path, "--json"],
        capture_output=True, text=True, timeout=600,
    )
    if done.returncode not in (0, 3):
        return None, [], f"exit {done.returncode}: {done.stderr[-400:]}"
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError as error:
        return None, [], f"bad JSON: {error}"
    findings = report.get("findings", [])
    primary = findings[0]["title"] if findings else None
    proven = []
    for finding in findings:
        for rec in finding.get("recommendations", []):
            verification = rec.get("verification") or {}
            match = CONF_LINE.search(rec.get("action", ""))
            if verification.get("status") == "proven" and match and match.group(1) not in [p["conf"] for p in proven]:
                proven.append({"conf": match.group(1), "detail": verification.get("detail")})
    return primary, proven, None


def run_real(module, workload, conf, cap, prefix):
    env = dict(os.environ, VRAMSCOPE_WORKLOADS=module, PYTORCH_CUDA_ALLOC_CONF=conf)
    subprocess.run(
        [sys.executable, os.path.join(HERE, "run_case.py"), workload, str(cap), "1.0", prefix],
        env=env, capture_output=True, timeout=900,
    )
    try:
        with open(prefix + ".json") as f:
            record = json.load(f)
    except (OSError, json.JSONDecodeError):
        return {"failed": True}
    if os.path.exists(prefix + ".pickle"):
        os.remove(prefix + ".pickle")
    return record


def main():
    gt, binary, module, out = sys.argv[1:5]
    jobs = int(sys.argv[sys.argv.index("--jobs") + 1]) if "--jobs" in sys.argv else 12
    records = {}
    for path in glob.glob(os.path.join(gt, "runs", "*.json")):
        with open(path) as f:
            records[os.path.basename(path)[:-5]] = json.load(f)
    ooms = sorted(name for name, r in records.items() if r.get("oom") and r.get("cap_bytes"))
    with futures.ThreadPoolExecutor(jobs) as pool:
        diagnoses = dict(zip(ooms, pool.map(
            lambda name: diagnose(binary, os.path.join(gt, "runs", name + ".pickle")), ooms)))
    os.makedirs(os.path.join(gt, "recheck"), exist_ok=True)
    wanted = {}
    for name in ooms:
        record = records[name]
        for setting in diagnoses[name][1]:
            key = (record["workload"], setting["conf"], record["cap_bytes"])
            known = f"{key[0]}__{tag(key[1])}__cap{key[2]}"
            if known not in records:
                wanted[key] = os.path.join(gt, "recheck", known)
    with futures.ThreadPoolExecutor(jobs) as pool:
        reran = dict(zip(wanted, pool.map(lambda kv: run_real(module, *kv[0], kv[1]), wanted.items())))
    result = []
    for name in ooms:
        record = records[name]
        primary, proven, error = diagnoses[name]
        rows = []
        for setting in proven:
            key = (record["workload"], setting["conf"], record["cap_bytes"])
            real = records.get(f"{key[0]}__{tag(key[1])}__cap{key[2]}") or reran.get(key, {})
            rows.append({
                "conf": setting["conf"],
                "detail": setting["detail"],
                "real": "failed" if real.get("failed") else ("OOM" if real.get("oom") else "ran"),
                "real_peak_reserved_bytes": real.get("reserved_peak_bytes"),
                "from_ground_truth": key not in reran,
            })
        result.append({"run": name, "conf": record["conf"], "cap_bytes": record["cap_bytes"],
                       "primary_finding": primary, "error": error, "proven": rows})
        print(name, "|", primary, "|", ", ".join(f"{r['conf']}: {r['real']}" for r in rows) or "no proven setting",
              flush=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
