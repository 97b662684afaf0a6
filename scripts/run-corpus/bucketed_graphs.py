"""An inference server that captures one CUDA graph per batch-size bucket, each with its own
private memory pool (the default), serves requests through them, and runs a request larger than
its largest bucket eagerly. `--share-pool 1` captures every bucket into one shared pool, largest
first, as servers that capture many graphs do.

    python3 bucketed_graphs.py --cap-gib G [--share-pool 0|1] [--large-request 12288] [--requests 100]
"""

import argparse
import json
import random
import time

import torch
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--share-pool", type=int, default=0)
parser.add_argument("--large-request", type=int, default=12288, help="rows of the eager request")
parser.add_argument("--requests", type=int, default=100)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

width = 2048
net = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                                torch.nn.Linear(4 * width, width)) for _ in range(4)])
net = net.cuda().eval()
buckets = [8192, 4096, 2048, 1024, 512]
graphs = {}
shared_pool = torch.cuda.graph_pool_handle() if args.share_pool else None
with torch.no_grad():
    for rows in buckets:
        static_in = torch.zeros(rows, width, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                net(static_in)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.empty_cache()  # the warm-up's cached blocks go back before the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=shared_pool):
            static_out = net(static_in)
        graphs[rows] = (graph, static_in, static_out)
        print(f"captured bucket {rows}", flush=True)
    rng = random.Random(3)
    total = 0.0
    for request in range(args.requests):
        rows = rng.randint(1, buckets[0])
        bucket = min(b for b in buckets if b >= rows)
        graph, static_in, static_out = graphs[bucket]
        static_in[:rows].normal_()
        graph.replay()
        total += static_out[:rows].float().mean().item()
    print(f"served {args.requests} requests through {len(graphs)} graphs, mean {total / args.requests:.4f}",
          flush=True)
    x = torch.randn(args.large_request, width, device="cuda")
    print(f"eager request of {args.large_request} rows: mean {net(x).float().mean().item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
