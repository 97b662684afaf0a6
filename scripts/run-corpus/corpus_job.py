"""What every corpus program of the fifth batch on shares: the `--cap-gib` switch (the smaller
GPU it runs on, gpu_size.limit_memory), the device, and the done line calibrate.py and
run_corpus.py read (issues 32, 35; docs/run-validation.md).

A program is first run here, on a CPU with small switches (CORPUS_SMOKE_CPU=1, smoke_cpu.py), so
that a mistake in it shows before it costs device time. Under that switch DEVICE is the CPU and
the done line reports no peaks; nothing else in the program changes.

    from corpus_job import DEVICE, parse_args, finish
    parser = argparse.ArgumentParser(); parser.add_argument("--batch-size", type=int, default=8)
    args = parse_args(parser)        # adds --cap-gib, parses, applies the cap
    ...                              # the job, on DEVICE
    finish(args.steps)               # the done line
"""

import json
import os
import time

import torch
from gpu_size import limit_memory

# The CPU smoke test (smoke_cpu.py) runs the programs without a GPU.
SMOKE_CPU = os.environ.get("CORPUS_SMOKE_CPU") == "1"
DEVICE = torch.device("cpu" if SMOKE_CPU else "cuda")
_STARTED = time.time()


def parse_args(parser, how=None):
    """Adds `--cap-gib G` (0: the whole card), parses the command line and applies the cap:
    `how` is gpu_size.limit_memory's ("cap": a per-process cap the allocator enforces while the
    card has room, as a user sharing a card sets; default: a smaller card)."""
    parser.add_argument("--cap-gib", type=float, default=0.0,
                        help="leave the job about this many GiB of device memory (0: all)")
    args = parser.parse_args()
    if not SMOKE_CPU:
        limit_memory(args.cap_gib, how)
    return args


def synchronize():
    """Waits for the device's queued work (nothing to wait for on the CPU)."""
    if not SMOKE_CPU:
        torch.cuda.synchronize()


def finish(steps, **extra):
    """Prints the done line: steps run, seconds, PyTorch's peak allocated and reserved bytes and
    its allocation retries (a retry freed cached memory to get past a full card, so the peak may
    be lower than the job's own: calibrate.py then measures again alone), with any `extra` fields
    (e.g. rank=…). Zeros on the CPU smoke test."""
    synchronize()
    stats = {} if SMOKE_CPU else torch.cuda.memory_stats()
    line = {"done": True, "steps": steps, "seconds": round(time.time() - _STARTED, 2),
            "peak_allocated_bytes": stats.get("allocated_bytes.all.peak", 0),
            "peak_reserved_bytes": stats.get("reserved_bytes.all.peak", 0),
            "alloc_retries": stats.get("num_alloc_retries", 0)}
    line.update(extra)
    print(json.dumps(line), flush=True)
