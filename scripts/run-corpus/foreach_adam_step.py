"""A wide MLP trained with AdamW's default (foreach) step, which makes its temporaries for all
parameters at once; the first `optimizer.step()` runs out after the forward and backward passed.
`--impl for-loop` steps one parameter at a time, `--impl fused` uses the fused kernel.

    python3 foreach_adam_step.py --cap-gib G [--impl foreach|for-loop|fused] [--optimizer adamw|adafactor]
                                 [--batch-size 512] [--steps 10]
"""

import argparse
import json
import time

import torch
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--impl", default="foreach", choices=["foreach", "for-loop", "fused"])
parser.add_argument("--optimizer", default="adamw", choices=["adamw", "adafactor"])
parser.add_argument("--batch-size", type=int, default=512)
parser.add_argument("--steps", type=int, default=10)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

width = 4096
net = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU())
                            for _ in range(8)]).cuda()
options = {"foreach": args.impl == "foreach"}
if args.impl == "fused":
    options = {"fused": True}
if args.optimizer == "adamw":
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4, **options)
else:
    optimizer = torch.optim.Adafactor(net.parameters(), lr=1e-3,
                                      foreach=options.get("foreach", False))
for step in range(args.steps):
    x = torch.randn(args.batch_size, width, device="cuda")
    loss = net(x).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
