"""A deep residual MLP whose saved activations do not fit; `--checkpoint 1` recomputes each
block's activations in the backward pass (torch.utils.checkpoint) instead of keeping them.

    python3 deep_activations.py --cap-gib G [--checkpoint 0|1] [--batch-size 8192] [--steps 20]
"""

import argparse
import json
import time

import torch
from gpu_size import limit_memory
from torch.utils.checkpoint import checkpoint

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--checkpoint", type=int, default=0)
parser.add_argument("--batch-size", type=int, default=8192)
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)


class Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


width, depth = 1024, 24
blocks = torch.nn.ModuleList([Block(width) for _ in range(depth)]).cuda()
optimizer = torch.optim.AdamW(blocks.parameters(), lr=1e-4)
for step in range(args.steps):
    h = torch.randn(args.batch_size, width, device="cuda")
    for b in blocks:
        h = checkpoint(b, h, use_reentrant=False) if args.checkpoint else b(h)
    loss = h.square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
