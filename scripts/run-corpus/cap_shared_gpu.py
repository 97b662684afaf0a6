"""Training on a shared GPU under a per-process cap (`torch.cuda.set_per_process_memory_fraction`,
set by the program as a user sharing a card does) with a batch that doubles every few steps
(a batch-size warm-up): the last stage's batch does not fit under the cap while the card has room.

    python3 cap_shared_gpu.py --cap-gib G [--max-batch 4096] [--grow-every 8] [--steps 40]
"""

import argparse
import json
import time

import torch
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0, help="the process's cap in GiB (0: none)")
parser.add_argument("--max-batch", type=int, default=4096)
parser.add_argument("--grow-every", type=int, default=8)
parser.add_argument("--steps", type=int, default=40)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib, how="cap")

width = 3072
net = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.SiLU())
                            for _ in range(6)], torch.nn.Linear(width, 100)).cuda()
optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
for step in range(args.steps):
    batch = min(args.max_batch, 256 << (step // args.grow_every))
    x = torch.randn(batch, width, device="cuda")
    y = torch.randint(0, 100, (batch,), device="cuda")
    loss = torch.nn.functional.cross_entropy(net(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} batch {batch} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
