"""A transformer encoder trained on batches of varying sequence length (seeded), with a running
statistic kept on the GPU from every step: blocks of many sizes come and go.

    python3 varlen_transformer.py --cap-gib G [--steps 60] [--max-len 2048]
"""

import argparse
import json
import random
import time

import torch
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--max-len", type=int, default=2048)
parser.add_argument("--batch-size", type=int, default=16)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

random.seed(7)
torch.manual_seed(7)
d_model = 512
layer = torch.nn.TransformerEncoderLayer(d_model, 8, 2048, batch_first=True)
net = torch.nn.TransformerEncoder(layer, 6).cuda()
head = torch.nn.Linear(d_model, 1).cuda()
optimizer = torch.optim.AdamW(list(net.parameters()) + list(head.parameters()), lr=1e-4)
stats = []
for step in range(args.steps):
    length = random.choice([64, 128, 192, 384, 640, 1024, 1536, args.max_len])
    x = torch.randn(args.batch_size, length, d_model, device="cuda")
    loss = head(net(x)).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    stats.append(torch.zeros(length * 64, device="cuda") + loss.detach())
    if len(stats) > 8:
        stats.pop(0)
    print(f"step {step} length {length} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
