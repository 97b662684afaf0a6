"""One ground-truth run: a workload in a fresh process under the PYTORCH_CUDA_ALLOC_CONF of the
environment and an optional per-process cap, with the full allocation history recorded.

Usage: PYTORCH_CUDA_ALLOC_CONF=... python3 run_case.py WORKLOAD CAP_BYTES SCALE OUT_PREFIX

WORKLOAD comes from workloads.py, or from the module named by VRAMSCOPE_WORKLOADS (e.g.
`workloads_heldout`). VRAMSCOPE_STACKS picks the stacks recorded with each event: `python`
(default, the ground truth's) or `all` (Python and C++ frames, what a bare
`torch.cuda.memory._record_memory_history()` records).

Writes OUT_PREFIX.json (what PyTorch reported) and OUT_PREFIX.pickle (the snapshot, at the OOM
or at the end).
"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import importlib  # noqa: E402

WORKLOADS = importlib.import_module(os.environ.get("VRAMSCOPE_WORKLOADS", "workloads")).WORKLOADS

workload, cap_bytes, scale, prefix = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
torch.cuda.init()
total = torch.cuda.get_device_properties(0).total_memory
allowed = None
if cap_bytes > 0:
    fraction = cap_bytes / total
    torch.cuda.set_per_process_memory_fraction(fraction, 0)
    # What the allocator computes: static_cast<size_t>(fraction * totalGlobalMem).
    allowed = int(fraction * float(total))
torch.cuda.memory._record_memory_history(
    max_entries=2_000_000, context="all", stacks=os.environ.get("VRAMSCOPE_STACKS", "python")
)

started = time.time()
oom = False
error = None
try:
    WORKLOADS[workload](scale)
    torch.cuda.synchronize()
except torch.OutOfMemoryError as e:
    oom = True
    error = str(e).splitlines()[0][:300]

snapshot = torch.cuda.memory._snapshot()
stats = torch.cuda.memory_stats()
trace = snapshot["device_traces"][0] if snapshot["device_traces"] else []
allocs_before_oom = None
oom_event = None
for index, event in enumerate(trace):
    if event["action"] == "oom":
        oom_event = index
        allocs_before_oom = sum(1 for e in trace[:index] if e["action"] == "alloc")
        break
torch.cuda.memory._dump_snapshot(prefix + ".pickle")
record = {
    "workload": workload,
    "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
    "cap_bytes": cap_bytes or None,
    "allowed_bytes": allowed,
    "device_total_bytes": total,
    "scale": scale,
    "oom": oom,
    "error": error,
    "oom_event": oom_event,
    "allocs_before_oom": allocs_before_oom,
    "trace_events": len(trace),
    "alloc_events": sum(1 for e in trace if e["action"] == "alloc"),
    "reserved_peak_bytes": stats.get("reserved_bytes.all.peak", 0),
    "allocated_peak_bytes": stats.get("allocated_bytes.all.peak", 0),
    "reserved_current_bytes": stats.get("reserved_bytes.all.current", 0),
    "num_alloc_retries": stats.get("num_alloc_retries", 0),
    "num_ooms": stats.get("num_ooms", 0),
    "num_device_alloc": stats.get("num_device_alloc", 0),
    "num_device_free": stats.get("num_device_free", 0),
    "seconds": round(time.time() - started, 3),
    "torch": torch.__version__,
    "allocator_settings": snapshot.get("allocator_settings"),
}
with open(prefix + ".json", "w") as f:
    json.dump(record, f, indent=1, default=str)
print(json.dumps({k: record[k] for k in ("workload", "conf", "cap_bytes", "oom", "reserved_peak_bytes", "seconds")}))
