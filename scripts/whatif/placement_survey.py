#!/usr/bin/env python3
"""Where does the driver put segments? Runs every workload under PyTorch's defaults, uncapped, in
fresh processes (RUNS times one at a time, then RUNS times all workloads side by side) and keeps
each run's segment events only: (event index, size, address relative to the run's first segment).

Usage: python3 placement_survey.py OUT.json [RUNS]

The what-if replay's placement check (`PlacementSpread`) draws every new segment's address at
random; this data says which segments a real driver does and does not keep in one order from run
to run, so a closer draw can be built and checked.
"""
import concurrent.futures as futures
import json
import os
import pickle
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
GROUND_TRUTH = ["train_varlen", "frag_longlived", "two_streams", "transformer_step", "kv_cache", "small_churn"]
HELDOUT = ["cnn_train", "random_lifetimes", "mlp_grad_accum", "beam_search", "streams_pipeline"]


def segments(workload, module, prefix):
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    env["VRAMSCOPE_WORKLOADS"] = module
    done = subprocess.run([sys.executable, os.path.join(HERE, "run_case.py"), workload, "0", "1.0", prefix],
                          env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0 or not os.path.exists(prefix + ".pickle"):
        return {"error": done.stderr[-1000:]}
    with open(prefix + ".pickle", "rb") as f:
        snapshot = pickle.load(f)
    os.remove(prefix + ".pickle")
    trace = snapshot["device_traces"][0]
    made = [(i, e["size"], e["addr"]) for i, e in enumerate(trace) if e["action"] == "segment_alloc"]
    if not made:
        return {"segments": []}
    base = made[0][2]
    return {"segments": [[i, size, addr - base] for i, size, addr in made]}


def main():
    out, runs = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3
    cases = [(w, "workloads") for w in GROUND_TRUTH] + [(w, "workloads_heldout") for w in HELDOUT]
    result = {w: {"alone": [], "side_by_side": []} for w, _ in cases}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(runs):
            for w, module in cases:
                result[w]["alone"].append(segments(w, module, os.path.join(tmp, f"{w}_a{r}")))
                print(f"alone {w} r{r}", flush=True)
        with futures.ThreadPoolExecutor(len(cases)) as pool:
            for r in range(runs):
                jobs = {pool.submit(segments, w, module, os.path.join(tmp, f"{w}_p{r}")): w for w, module in cases}
                for job in futures.as_completed(jobs):
                    result[jobs[job]]["side_by_side"].append(job.result())
                print(f"side by side r{r}", flush=True)
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
