"""PyTorch job for the recording comparison in docs/gpu-verification.md.

Allocates memory in steps of a few GiB on every visible GPU (cuda:0 by default), holds, deletes
the tensors (the caching allocator keeps the memory reserved, so NVML does not see a drop), then
calls torch.cuda.empty_cache() (NVML sees the drop). Prints one JSON line per step with the wall
clock so that the two recorded series can be lined up against what the job did.
"""

import json
import sys
import time

import torch

GIB = 1 << 30
STEP_GIB = 4
STEPS = 4
HOLD_S = 2.5


def mark(what, device):
    torch.cuda.synchronize(device)
    print(
        json.dumps(
            {
                "t_ms": int(time.time() * 1000),
                "step": what,
                "device": str(device),
                "allocated_bytes": torch.cuda.memory_allocated(device),
                "reserved_bytes": torch.cuda.memory_reserved(device),
            }
        ),
        flush=True,
    )


def main():
    device = torch.device(sys.argv[1] if len(sys.argv) > 1 else "cuda:0")
    torch.zeros(1, device=device)
    mark("context", device)
    time.sleep(HOLD_S)
    tensors = []
    for i in range(1, STEPS + 1):
        t = torch.empty(STEP_GIB * GIB, dtype=torch.uint8, device=device)
        t.fill_(i)
        tensors.append(t)
        mark(f"alloc {i * STEP_GIB} GiB", device)
        time.sleep(HOLD_S)
    del t
    tensors.clear()
    mark("del (still reserved)", device)
    time.sleep(HOLD_S)
    torch.cuda.empty_cache()
    mark("empty_cache", device)
    time.sleep(HOLD_S)
    big = torch.empty(10 * GIB, dtype=torch.uint8, device=device)
    big.fill_(7)
    mark("alloc 10 GiB", device)
    time.sleep(HOLD_S)
    del big
    torch.cuda.empty_cache()
    mark("free + empty_cache", device)
    time.sleep(HOLD_S)
    mark("exit", device)


if __name__ == "__main__":
    main()
