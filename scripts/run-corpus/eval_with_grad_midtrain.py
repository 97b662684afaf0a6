"""Training with a validation pass every few steps over larger batches, whose forward runs
without `torch.no_grad()`: autograd keeps every layer's activations of the validation batch
until its loss is dropped. `--eval-no-grad 1` wraps validation in `torch.no_grad()`.

    python3 eval_with_grad_midtrain.py --cap-gib G [--eval-no-grad 0|1] [--batch-size 1024]
                                       [--eval-every 10] [--steps 30]
"""

import argparse
import contextlib
import json
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--eval-no-grad", type=int, default=0)
parser.add_argument("--batch-size", type=int, default=1024, help="training batch; validation takes 16x")
parser.add_argument("--eval-every", type=int, default=10)
parser.add_argument("--steps", type=int, default=30)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

width = 4096
net = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU())
                            for _ in range(6)], torch.nn.Linear(width, 10)).cuda()
optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)


def validate():
    net.eval()
    context = torch.no_grad() if args.eval_no_grad else contextlib.nullcontext()
    total = 0.0
    with context:
        for _ in range(2):
            x = torch.randn(16 * args.batch_size, width, device="cuda")
            y = torch.randint(0, 10, (16 * args.batch_size,), device="cuda")
            total += F.cross_entropy(net(x), y).item()
    net.train()
    return total / 2


for step in range(args.steps):
    x = torch.randn(args.batch_size, width, device="cuda")
    y = torch.randint(0, 10, (args.batch_size,), device="cuda")
    loss = F.cross_entropy(net(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
    if (step + 1) % args.eval_every == 0:
        print(f"step {step} validation loss {validate():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
