"""A wide model with a small batch: weights and gradients fit, AdamW's two state tensors per
parameter do not, so it runs out inside the first `optimizer.step()`.

    python3 optimizer_state.py --cap-gib G [--optimizer adamw|sgd|adafactor] [--steps 30]
"""

import argparse
import json
import time

import torch
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd", "adafactor"])
parser.add_argument("--steps", type=int, default=30)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

width = 4096
net = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(10)]).cuda()
if args.optimizer == "adamw":
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
elif args.optimizer == "sgd":
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
else:
    optimizer = torch.optim.Adafactor(net.parameters(), lr=1e-3)
for step in range(args.steps):
    x = torch.randn(64, width, device="cuda")
    loss = net(x).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.5f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
