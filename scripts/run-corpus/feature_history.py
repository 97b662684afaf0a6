"""Training that keeps every step's hidden features for an end-of-epoch analysis: on the GPU by
default (grows per step); `--history-device cpu` copies them off the GPU instead.

    python3 feature_history.py --cap-gib G [--history-device gpu|cpu] [--steps 150]
"""

import argparse
import json
import time

import torch
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--history-device", default="gpu", choices=["gpu", "cpu"])
parser.add_argument("--steps", type=int, default=150)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

width = 2048
encoder = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                              torch.nn.Linear(width, width)).cuda()
head = torch.nn.Linear(width, 10).cuda()
optimizer = torch.optim.AdamW(list(encoder.parameters()) + list(head.parameters()), lr=1e-4)
history = []
for step in range(args.steps):
    x = torch.randn(2048, width, device="cuda")
    y = torch.randint(0, 10, (2048,), device="cuda")
    features = encoder(x)
    loss = torch.nn.functional.cross_entropy(head(features), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    kept = features.detach()
    history.append(kept.cpu() if args.history_device == "cpu" else kept)
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
