"""Holds GPU memory for a while, so that process lists are not empty during the benchmark."""

import sys
import time

import torch

gib = int(sys.argv[1]) if len(sys.argv) > 1 else 8
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 120
held = torch.empty(gib << 30, dtype=torch.uint8, device="cuda:0")
held.fill_(1)
torch.cuda.synchronize()
print(f"holding {gib} GiB on cuda:0 for {seconds:.0f} s", flush=True)
time.sleep(seconds)
