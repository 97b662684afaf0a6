"""An evaluation loop that forgets `torch.no_grad()` and keeps every batch's output: each kept
output holds its whole autograd graph, so memory grows batch after batch.

    python3 eval_without_no_grad.py --cap-gib G [--batches 200] [--no-grad 0|1]

`--no-grad 1` is the fix: evaluation under torch.no_grad() keeps the outputs but no graphs.
"""

import argparse
import json
import time

import torch
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--batches", type=int, default=200)
parser.add_argument("--no-grad", type=int, default=0)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

width = 2048
net = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU())
                            for _ in range(4)], torch.nn.Linear(width, 100)).cuda()
outputs = []
for batch in range(args.batches):
    x = torch.randn(512, width, device="cuda")
    with torch.set_grad_enabled(not args.no_grad):
        outputs.append(net(x).softmax(dim=1))
    if batch % 20 == 0:
        print(f"batch {batch}", flush=True)
accuracy = torch.cat(outputs).argmax(dim=1).float().mean().item()
torch.cuda.synchronize()
print(json.dumps({"done": True, "batches": args.batches, "metric": accuracy,
                  "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
