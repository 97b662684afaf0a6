"""Runs corpus programs on the CPU, small, before they cost device time: each case's program
with its `smoke_args` (cases.json) under CORPUS_SMOKE_CPU=1 (corpus_job.DEVICE is the CPU), in
its own configuration, in the configuration its cap is calibrated from, and under every value of
every switch it declares (vary_arg). A run passes when it exits 0 with its done line. Nothing is
learnt about memory here: the sizes are the smoke test's, not the case's.

    python3 scripts/run-corpus/smoke_cpu.py [CASE …]     # needs torch (a CPU build is enough)

A case whose program cannot run on a CPU (CUDA graphs, several processes on one GPU) says so in
`smoke_skip` instead of `smoke_args`.
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CASES_FILE = os.environ.get("CORPUS_CASES", os.path.join(HERE, "cases.json"))
PROGRAMS = os.path.dirname(os.path.abspath(CASES_FILE))


def replaced(args, flag, value):
    out = list(args)
    for i, word in enumerate(out):
        if word == flag and i + 1 < len(out):
            out[i + 1] = value
            return out
    return out + [flag, value]


def configurations(case):
    """(label, extra args) of every configuration the corpus will run: the case's own, the one
    its cap comes from, and each declared value of each switch."""
    own = list(case["args"])
    out = [("own", own)]
    cap_from = case.get("cap_from", [])
    if cap_from:
        args = own
        for flag, value in zip(cap_from[::2], cap_from[1::2]):
            args = replaced(args, flag, value)
        out.append(("cap_from", args))
    for vary in case.get("vary_arg", []):
        flag, _, values = vary.partition("=")
        for value in values.split(","):
            out.append((f"{flag}={value}", replaced(own, flag, value)))
    return out


def main():
    with open(CASES_FILE) as f:
        cases = json.load(f)
    only = sys.argv[1:]
    env = dict(os.environ, CORPUS_SMOKE_CPU="1", CUDA_VISIBLE_DEVICES="")
    failed = 0
    for case in cases:
        if only and case["case"] not in only:
            continue
        if not only and "smoke_args" not in case and "smoke_skip" not in case:
            continue  # earlier batches predate the smoke test
        if "smoke_skip" in case:
            print(f"{case['case']}: skipped ({case['smoke_skip']})", flush=True)
            continue
        for label, args in configurations(case):
            for flag, value in zip(case["smoke_args"][::2], case["smoke_args"][1::2]):
                if flag not in args:
                    args = replaced(args, flag, value)
                elif label == "own" or not label.startswith(flag + "="):
                    args = replaced(args, flag, value)
            command = [sys.executable, os.path.join(PROGRAMS, case["script"]), *args]
            try:
                done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
                ok = done.returncode == 0 and '{"done": true' in done.stdout
                why = "" if ok else f"exit {done.returncode}: {done.stderr.strip()[-600:]}"
            except subprocess.TimeoutExpired:
                ok, why = False, "did not finish in 600 s"
            failed += not ok
            print(f"{case['case']} [{label}] {'ok' if ok else 'FAILED'} {' '.join(args)} {why}", flush=True)
    sys.exit(1 if failed else 0)


main()
