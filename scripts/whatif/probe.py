#!/usr/bin/env python3
"""Facts the replay model relies on, read off the real GPU and PyTorch (run on the device):
which PYTORCH_CUDA_ALLOC_CONF keys this PyTorch accepts, the page sizes expandable segments map,
and what a snapshot's allocator_settings hold.
"""
import json
import os
import subprocess
import sys

CHILD = r'''
import json, torch
x = torch.empty(1024, device="cuda")
torch.cuda.memory._record_memory_history(max_entries=100000)
small = torch.empty(256 * 1024, device="cuda")       # 1 MiB: small pool
large = torch.empty(30 * 1024 * 1024 // 4, device="cuda")   # 30 MiB: large pool
mid = torch.empty(3 * 1024 * 1024 // 4, device="cuda")      # 3 MiB
snap = torch.cuda.memory._snapshot()
events = [(e["action"], e["size"]) for e in snap["device_traces"][0] if e["action"] != "alloc"]
print(json.dumps({"settings": snap.get("allocator_settings"), "events": events,
                  "segments": [(s["total_size"], s.get("is_expandable")) for s in snap["segments"]]}))
'''

CONFS = [
    "",
    "expandable_segments:True",
    "per_process_memory_fraction:0.5",
    "max_non_split_rounding_mb:64",
    "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
    "garbage_collection_threshold:0.6,max_split_size_mb:128",
    "large_segment_size_mb:32",
    "expandable_segments_page_size_mb:4",
    "graph_capture_record_stream_reuse:True",
]

import torch  # noqa: E402

print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                  "total_memory": torch.cuda.get_device_properties(0).total_memory}))
for conf in CONFS:
    env = dict(os.environ)
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    else:
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    tail = done.stdout.strip().splitlines()[-1:] if done.returncode == 0 else done.stderr.strip().splitlines()[-2:]
    print(f"== {conf or 'default'} rc={done.returncode}")
    for line in tail:
        print("  ", line[:1500])
