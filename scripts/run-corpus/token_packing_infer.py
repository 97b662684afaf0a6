"""Inference over requests packed into batches of varying token counts (seeded), with the last
few batches' outputs kept alive in a queue until they are sent: blocks of many sizes with
overlapping lifetimes.

    python3 token_packing_infer.py --cap-gib G [--max-tokens 32768] [--queue 4] [--batches 200]
"""

import argparse
import collections
import json
import random
import time

import torch
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--max-tokens", type=int, default=32768)
parser.add_argument("--queue", type=int, default=4, help="batches whose outputs wait to be sent")
parser.add_argument("--batches", type=int, default=200)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

rng = random.Random(5)
width = 2048
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                                  torch.nn.Linear(4 * width, width)) for _ in range(4)])
model = model.cuda().half().eval()
outbox = collections.deque()
sent = 0
with torch.no_grad():
    for batch in range(args.batches):
        tokens = rng.randint(args.max_tokens // 16, args.max_tokens)
        x = torch.randn(tokens, width, device="cuda", dtype=torch.float16)
        outbox.append(model(x))
        if len(outbox) > args.queue:
            sent += outbox.popleft().shape[0]
        if batch % 20 == 0:
            print(f"batch {batch} tokens {tokens} sent {sent}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "batches": args.batches, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
