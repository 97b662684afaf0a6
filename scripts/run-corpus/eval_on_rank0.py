"""A two-process job launched like torchrun (RANK, LOCAL_RANK, WORLD_SIZE per process), both
processes on the same GPU, each training a product classifier (50,000 categories) on its share of
the batches under a per-process memory cap (`torch.cuda.set_per_process_memory_fraction`, set by
the job as ranks sharing a card do). Rank 0 alone also runs the periodic evaluation, over a much
larger batch and with the scores of every category for a top-5 accuracy: it runs out at its first
evaluation while rank 1 trains on. The launcher exits with the first failing rank's status.

    python3 eval_on_rank0.py --cap-gib G [--eval-batch-size 16384] [--batch-size 1024] [--steps 30]
                             [--eval-every 10]
"""

import argparse
import json
import os
import sys
import time

from ranks import run_as_ranks  # never imports torch: the launcher stays off the GPU

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0, help="each process's cap in GiB (0: none)")
parser.add_argument("--batch-size", type=int, default=1024)
parser.add_argument("--eval-batch-size", type=int, default=16384, help="rank 0's evaluation batch")
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--eval-every", type=int, default=10)
parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
args = parser.parse_args()

run_as_ranks(__file__, args.worker)

import torch  # noqa: E402  (the launcher itself never imports torch)
import torch.nn.functional as F  # noqa: E402
from gpu_size import limit_memory  # noqa: E402

rank = int(os.environ["RANK"])
started = time.time()
limit_memory(args.cap_gib, how="cap")
torch.manual_seed(rank)
features, width, categories = 2048, 1024, 50000
net = torch.nn.Sequential(torch.nn.Linear(features, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                          torch.nn.ReLU(), torch.nn.Linear(width, categories)).cuda()
optimizer = torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.9)


def evaluate():
    """Top-5 accuracy over one evaluation batch."""
    net.eval()
    with torch.no_grad():
        x = torch.randn(args.eval_batch_size, features, device="cuda")
        y = torch.randint(0, categories, (args.eval_batch_size,), device="cuda")
        top5 = net(x).topk(5, dim=-1).indices
        accuracy = (top5 == y[:, None]).any(dim=-1).float().mean().item()
    net.train()
    return accuracy


for step in range(args.steps):
    x = torch.randn(args.batch_size, features, device="cuda")
    y = torch.randint(0, categories, (args.batch_size,), device="cuda")
    loss = F.cross_entropy(net(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if step % 5 == 0:
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    if rank == 0 and (step + 1) % args.eval_every == 0:
        print(f"rank 0 step {step} top-5 accuracy {evaluate():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "rank": rank, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
