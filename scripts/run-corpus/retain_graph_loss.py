"""Training that keeps its running loss as a tensor: `running = running + loss`, with
`backward(retain_graph=True)` (the usual way to silence "Trying to backward through the graph a
second time"). Every step's graph and the activations it saved stay alive through `running`.
`--fixed 1` adds `loss.item()` and drops retain_graph.

    python3 retain_graph_loss.py --cap-gib G [--fixed 0|1] [--batch-size 512] [--steps 120]
"""

import argparse
import json
import time

import torch
from gpu_size import limit_memory
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--fixed", type=int, default=0)
parser.add_argument("--batch-size", type=int, default=512)
parser.add_argument("--steps", type=int, default=120)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

width = 2048
net = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.LayerNorm(width), torch.nn.Linear(width, width),
                                                torch.nn.GELU()) for _ in range(4)]).cuda()
optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
running = torch.zeros((), device="cuda")
for step in range(args.steps):
    x = torch.randn(args.batch_size, width, device="cuda")
    target = torch.randn(args.batch_size, width, device="cuda")
    loss = F.mse_loss(net(x), target)
    if args.fixed:
        loss.backward()
        running += loss.item()
    else:
        loss.backward(retain_graph=True)
        running = running + loss
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if step % 10 == 0:
        print(f"step {step} mean loss {running.item() / (step + 1):.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
