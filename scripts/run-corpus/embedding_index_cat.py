"""Building a retrieval index: a bi-encoder (stood in for by a float16 MLP over pooled token
features) encodes a document collection batch by batch, and each batch's normalised embeddings
are appended to the index, one tensor on the GPU grown with `torch.cat` after every batch (the
old index and the new one are both alive during each append). Nothing is ever dropped: the index
grows by a batch of embeddings per step until the collection is encoded, then it is searched.
`--index-device cpu` moves each batch's embeddings to host memory and joins them once at the end;
the search then streams the index through the GPU in chunks.

    python3 embedding_index_cat.py --cap-gib G [--index-device gpu|cpu] [--batch-size 1024]
                                   [--batches 500]
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--index-device", default="gpu", choices=["gpu", "cpu"])
parser.add_argument("--batch-size", type=int, default=1024)
parser.add_argument("--batches", type=int, default=500)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
features, width, depth, dim = 768, 4096, 8, 1024
layers = [torch.nn.Linear(features, width), torch.nn.GELU()]
for _ in range(depth):
    layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
encoder = torch.nn.Sequential(*layers, torch.nn.Linear(width, dim)).cuda().half().eval()
index = torch.empty(0, dim, dtype=torch.float16, device="cuda")
on_host = []
with torch.no_grad():
    for batch in range(args.batches):
        pooled = torch.randn(args.batch_size, features, device="cuda", dtype=torch.float16)
        embeddings = F.normalize(encoder(pooled), dim=-1)
        if args.index_device == "gpu":
            index = torch.cat([index, embeddings])
        else:
            on_host.append(embeddings.cpu())
        if batch % 50 == 0:
            print(f"batch {batch} documents {(batch + 1) * args.batch_size} indexed", flush=True)
    if on_host:
        index = torch.cat(on_host)
    queries = F.normalize(encoder(torch.randn(64, features, device="cuda", dtype=torch.float16)), dim=-1)
    best = torch.full((64,), -2.0, device="cuda", dtype=torch.float16)
    for chunk in index.split(65536):
        best = torch.maximum(best, (queries @ chunk.to("cuda").T).max(dim=-1).values)
    print(f"index of {index.shape[0]} documents on {index.device}, mean best score "
          f"{best.float().mean().item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "batches": args.batches, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
