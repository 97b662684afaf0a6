"""A two-process job launched like torchrun (RANK, LOCAL_RANK, WORLD_SIZE per process), each
process training on its share of the data: rank 1 gets twice rank 0's batch, on the same GPU.
The launcher exits with the first failing rank's status.

    python3 two_ranks.py --cap-gib G [--batch-size 2048] [--steps 40]
"""

import argparse
import json
import os
import sys
import time

from ranks import run_as_ranks  # never imports torch: the launcher stays off the GPU

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--batch-size", type=int, default=2048, help="rank 0's batch; rank r gets (r+1)x")
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
args = parser.parse_args()

run_as_ranks(__file__, args.worker)

import torch  # noqa: E402  (the launcher itself never imports torch)
from gpu_size import limit_memory

rank = int(os.environ["RANK"])
started = time.time()
limit_memory(args.cap_gib, how="cap")
batch = args.batch_size * (rank + 1)
width = 4096
net = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU())
                            for _ in range(4)]).cuda()
optimizer = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
for step in range(args.steps):
    x = torch.randn(batch, width, device="cuda")
    loss = net(x).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if step % 10 == 0:
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "rank": rank, "batch": batch, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
