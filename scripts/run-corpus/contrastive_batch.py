"""Contrastive (CLIP-style) training of two towers over a large batch: the batch x batch
similarity matrix, its softmax in both directions and their gradients dominate the first step.

    python3 contrastive_batch.py --cap-gib G [--batch-size 16384] [--precision fp32|bf16] [--steps 20]
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
parser.add_argument("--batch-size", type=int, default=16384)
parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)


def tower(width_in):
    return torch.nn.Sequential(torch.nn.Linear(width_in, 2048), torch.nn.GELU(),
                               torch.nn.Linear(2048, 2048), torch.nn.GELU(),
                               torch.nn.Linear(2048, 512)).cuda()


images, texts = tower(1024), tower(768)
scale = torch.nn.Parameter(torch.tensor(2.659, device="cuda"))
optimizer = torch.optim.AdamW([*images.parameters(), *texts.parameters(), scale], lr=1e-4)
for step in range(args.steps):
    image_features = torch.randn(args.batch_size, 1024, device="cuda")
    text_features = torch.randn(args.batch_size, 768, device="cuda")
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if args.precision == "bf16"
                else contextlib.nullcontext())
    with autocast:
        a = F.normalize(images(image_features), dim=-1)
        b = F.normalize(texts(text_features), dim=-1)
        logits = scale.exp() * a @ b.T
        labels = torch.arange(args.batch_size, device="cuda")
        loss = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
