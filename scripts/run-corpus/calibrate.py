"""Chooses each corpus case's cap: the program runs once on the whole card (no cap) in the
configuration named by the case's `cap_from` (a changed argument) or `cap_from_env` (an allocator
setting), and the cap is `cap_factor` (default 1.05) times the peak PyTorch reported (reserved,
or allocated with `cap_of`). A cap stands in for a smaller GPU: one on which that configuration
just fits. Whether the case's own configuration then fails, and which change removes the failure,
is for the real runs to tell (run_corpus.py); nothing here is tuned to an outcome.

Calibration runs have no cap, so CALIBRATE_JOBS of them (default 3) share the card at once: device
time is scarce, and a program's peak is its own process's. One that fails while others ran beside
it (the card full of their memory), or whose allocator had to retry an allocation (its done line's
alloc_retries: cached memory was freed to get past a full card, so its peak may read low), is run
again alone, and only that second run counts.

    python3 scripts/run-corpus/calibrate.py OUT_DIR [CASE …]   # writes OUT_DIR/calibration.json
"""

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

HERE = os.path.dirname(os.path.abspath(__file__))
# The cases and their programs (another file for the dry-run test, test_run_corpus.py).
CASES_FILE = os.environ.get("CORPUS_CASES", os.path.join(HERE, "cases.json"))
PROGRAMS = os.path.dirname(os.path.abspath(CASES_FILE))
JOBS = max(1, int(os.environ.get("CALIBRATE_JOBS", "3")))


def replaced(args, changes):
    out = list(args)
    for flag, value in zip(changes[::2], changes[1::2]):
        if flag in out:
            out[out.index(flag) + 1] = value
        else:
            out += [flag, value]
    return out


def calibrate(case):
    env = dict(os.environ)
    env.update(case.get("cap_from_env", {}))
    args = replaced(case["args"], case.get("cap_from", []))
    started = time.time()
    try:
        done = subprocess.run([sys.executable, os.path.join(PROGRAMS, case["script"]), *args],
                              env=env, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired:
        return {"args": args, "env": case.get("cap_from_env", {}), "exit": None,
                "wall_seconds": round(time.time() - started, 1), "timed_out": True}
    peaks = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"done"')]
    result = {"args": args, "env": case.get("cap_from_env", {}), "exit": done.returncode,
              "wall_seconds": round(time.time() - started, 1), "peaks": peaks}
    if done.returncode != 0 or not peaks:
        result["stderr_tail"] = done.stderr[-1500:]
        return result
    if "cap_rank" in case:
        peaks = [p for p in peaks if p.get("rank") == case["cap_rank"]] or peaks
    key = "peak_allocated_bytes" if case.get("cap_of") == "allocated" else "peak_reserved_bytes"
    cap_bytes = case.get("cap_factor", 1.05) * max(p[key] for p in peaks)
    result["cap_gib"] = round(cap_bytes / 2**30, 3)
    return result


def main():
    out, only = sys.argv[1], sys.argv[2:]
    os.makedirs(out, exist_ok=True)
    with open(CASES_FILE) as f:
        cases = [c for c in json.load(f) if not only or c["case"] in only]
    results = {}

    def record(case, result):
        results[case["case"]] = result
        print(case["case"], json.dumps(result)[:1800], flush=True)
        # In the cases' order, after every case: a call cut short keeps what it learned.
        with open(os.path.join(out, "calibration.json"), "w") as f:
            json.dump({c["case"]: results[c["case"]] for c in cases if c["case"] in results}, f,
                      indent=1)

    failed = []
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        running = {pool.submit(calibrate, case): case for case in cases}
        for done in as_completed(running):
            case, result = running[done], done.result()
            record(case, result)
            retried = any(p.get("alloc_retries", 0) for p in result.get("peaks", []))
            if ("cap_gib" not in result or retried) and JOBS > 1:
                failed.append(case)
    for case in failed:
        record(case, dict(calibrate(case), failed_beside_others=results[case["case"]]))


main()
