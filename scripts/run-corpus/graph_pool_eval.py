"""A model served through a captured CUDA graph, then re-scored eagerly over a large batch: the
graph's private memory pool keeps the captured forward's memory while the eager pass runs.
`--release-graph 1` drops the graph (and its pool) before the eager pass.

    python3 graph_pool_eval.py --cap-gib G [--release-graph 0|1] [--eval-batch-size 8192]
"""

import argparse
import json
import time

import torch
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--release-graph", type=int, default=0)
parser.add_argument("--eval-batch-size", type=int, default=8192)
parser.add_argument("--replays", type=int, default=200)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

width = 2048
net = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                                torch.nn.Linear(4 * width, width)) for _ in range(4)])
net = net.cuda().eval()
static_in = torch.randn(8192, width, device="cuda")
with torch.no_grad():
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            net(static_in)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = net(static_in)
    for i in range(args.replays):
        static_in.normal_()
        graph.replay()
    print(f"served {args.replays} batches through the graph, checksum {static_out.sum().item():.3f}",
          flush=True)
    if args.release_graph:
        del graph, static_out
        torch.cuda.empty_cache()
    scores = []
    for chunk in range(4):
        x = torch.randn(args.eval_batch_size, width, device="cuda")
        scores.append(net(x).float().mean(dim=1))
        print(f"eager chunk {chunk} scored", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
