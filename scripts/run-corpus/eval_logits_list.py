"""Batch inference that collects every batch's logits in a list on the GPU and concatenates them
at the end (for a metric over the whole set). `--collect-device cpu` moves each batch's logits
to the host as it comes.

    python3 eval_logits_list.py --cap-gib G [--collect-device gpu|cpu] [--batch-size 4096] [--batches 100]
"""

import argparse
import json
import time

import torch
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--collect-device", default="gpu", choices=["gpu", "cpu"])
parser.add_argument("--batch-size", type=int, default=4096)
parser.add_argument("--batches", type=int, default=100)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

width, classes = 4096, 2000
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU())
                              for _ in range(4)], torch.nn.Linear(width, classes)).cuda().eval()
collected = []
with torch.no_grad():
    for batch in range(args.batches):
        x = torch.randn(args.batch_size, width, device="cuda")
        logits = model(x)
        collected.append(logits if args.collect_device == "gpu" else logits.cpu())
        if batch % 10 == 0:
            print(f"batch {batch} scored", flush=True)
    everything = torch.cat(collected)
    print(f"top class histogram max {everything.argmax(dim=1).bincount().max().item()}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "batches": args.batches, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
