"""A classifier whose batch does not fit: it runs out in its very first step.

    python3 first_step_mlp.py --cap-gib G [--batch-size 8192] [--steps 40]
"""

import argparse
import json
import time

import torch
from gpu_size import limit_memory
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0, help="per-process cap (0: the whole card)")
parser.add_argument("--batch-size", type=int, default=8192)
parser.add_argument("--steps", type=int, default=40)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

width = 4096
layers = [torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU()) for _ in range(6)]
net = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).cuda()
optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
for step in range(args.steps):
    x = torch.randn(args.batch_size, width, device="cuda")
    y = torch.randint(0, 10, (args.batch_size,), device="cuda")
    loss = F.cross_entropy(net(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
