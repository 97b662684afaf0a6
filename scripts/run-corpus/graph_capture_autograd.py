"""A low-latency text-embedding server (a 24-layer, 768-wide bfloat16 encoder, mean-pooled
sentence embeddings) that captures one CUDA graph per query-length bucket at start-up.

Scenario: the server answers queries 4 at a time; for latency it pads them to one of 8 length
buckets (64, 128, ..., 512 tokens) and replays a CUDA graph captured for that bucket; documents
longer than 512 tokens are embedded eagerly under torch.inference_mode(), 8 windows of 2,048 tokens
at a time.
Each graph is captured with torch.cuda.graph into its own private memory pool after warm-up
runs on a side stream, as in PyTorch's CUDA-graph recipe.

Mistake: the model was loaded, put in eval() mode and cast to bfloat16, but its parameters still
require grad and the warm-up and capture are not under torch.no_grad(). Each captured forward
is therefore recorded by autograd: the graph's output keeps its autograd graph, and with it every
layer's saved activations, alive inside that graph's private pool. The pools, which would hold
only one layer's working set, each hold the activations of 24 layers; they add up bucket after
bucket and a capture (or its warm-up) runs out of memory before serving starts.
`--capture-no-grad 1` warms up and captures under torch.no_grad().

Memory (bfloat16, 24 layers of width 768, 4 queries per bucket):
  parameters 195.1M x 2 B = 0.39 GB.
  saved activations of one captured forward with autograd on: ~17 tensors of width 768 per layer
  per token, 17 x 768 x 2 B x 24 = 0.63 MB a token (a CPU trace measured 0.58 MB at width
  1,024 x 0.75); a bucket of 4 x L tokens: u = 4 x 64 x 0.6 MB = 0.15 GB per 64 tokens of
  length; the 8 pools would add up to 36u = 5.5 GB.
  cap_from (--capture-no-grad 1): pools ~0.4 GB in all (one layer's working set each, allocator
  segments), eager long documents 8 x 2,048 tokens ~0.5 GB: peak ~1.3 GB.
  own (0): 0.39 GB + pools that grow by 1u, 2u, 3u, ... per bucket; the room under the cap
  (~1.35 GB + slack - 0.4 GB) is ~7-9u: fails in the warm-up or capture of the 4th bucket
  (256 tokens) with 6u = 0.9 GB held in the three earlier graphs' private pools (for any room
  from 6u to 36u the failure stays inside the captures, with the pools the largest share).

    python3 graph_capture_autograd.py --cap-gib G [--capture-no-grad 0|1] [--share-pool 0|1]
        [--batch-size 4] [--max-bucket 512] [--requests 300] [--layers 24] [--width 768]
"""

import argparse
import contextlib
import random

import torch
import torch.nn.functional as F

from corpus_job import DEVICE, SMOKE_CPU, finish, parse_args

parser = argparse.ArgumentParser()
parser.add_argument("--capture-no-grad", type=int, default=0, help="1: warm up and capture under torch.no_grad()")
parser.add_argument("--share-pool", type=int, default=0, help="1: capture every bucket's graph into one pool")
parser.add_argument("--batch-size", type=int, default=4, help="queries per graph replay")
parser.add_argument("--max-bucket", type=int, default=512, help="longest bucket (query tokens)")
parser.add_argument("--bucket-step", type=int, default=64)
parser.add_argument("--requests", type=int, default=300)
parser.add_argument("--long-docs", type=int, default=4, help="documents embedded eagerly")
parser.add_argument("--long-windows", type=int, default=8, help="2,048-token windows per long document")
parser.add_argument("--long-len", type=int, default=2048)
parser.add_argument("--layers", type=int, default=24)
parser.add_argument("--width", type=int, default=768)
parser.add_argument("--vocab", type=int, default=30522)
args = parse_args(parser)

torch.manual_seed(0)
rng = random.Random(0)


class Layer(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.heads = width // 64
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)
        self.norm1 = torch.nn.LayerNorm(width)
        self.fc1 = torch.nn.Linear(width, 4 * width)
        self.fc2 = torch.nn.Linear(4 * width, width)
        self.norm2 = torch.nn.LayerNorm(width)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = self.norm1(x + self.out(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)))
        return self.norm2(x + self.fc2(F.gelu(self.fc1(x))))


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = torch.nn.Embedding(args.vocab, args.width)
        self.positions = torch.nn.Embedding(max(args.long_len, args.max_bucket), args.width)
        self.norm = torch.nn.LayerNorm(args.width)
        self.layers = torch.nn.ModuleList([Layer(args.width) for _ in range(args.layers)])

    def forward(self, ids):
        x = self.norm(self.tokens(ids) + self.positions.weight[: ids.shape[1]])
        for layer in self.layers:
            x = layer(x)
        return x


def embed(ids):
    """Mean-pooled, L2-normalised sentence embeddings."""
    return F.normalize(encoder(ids).mean(dim=1).float(), dim=-1)


torch.set_default_dtype(torch.bfloat16)  # the checkpoint is loaded straight into bfloat16 weights
with DEVICE:
    encoder = Encoder().eval()
torch.set_default_dtype(torch.float32)
print(f"encoder {sum(p.numel() for p in encoder.parameters()) / 1e6:.1f}M parameters (bfloat16)", flush=True)
buckets = list(range(args.bucket_step, args.max_bucket + 1, args.bucket_step))
pool = torch.cuda.graph_pool_handle() if args.share_pool and not SMOKE_CPU else None
graphs = {}
for length in buckets:
    static_ids = torch.zeros(args.batch_size, length, dtype=torch.long, device=DEVICE)
    grad_mode = torch.no_grad() if args.capture_no_grad else contextlib.nullcontext()
    with grad_mode:
        if SMOKE_CPU:  # CUDA graphs need a GPU: the CPU test replays the function eagerly
            graphs[length] = (None, static_ids, embed(static_ids))
            continue
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                embed(static_ids)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            static_out = embed(static_ids)
    graphs[length] = (graph, static_ids, static_out)
    print(f"captured the graph for {length}-token queries, reserved "
          f"{torch.cuda.memory_reserved() / 2**30:.2f} GiB", flush=True)

# Serving: single queries of random length through their bucket's graph, scored against a few
# reference embeddings; then a few long documents, eagerly.
references = F.normalize(torch.randn(16, args.width, device=DEVICE), dim=-1)
best = torch.zeros(16, device=DEVICE)
for request in range(args.requests):
    n = rng.randint(5, args.max_bucket)
    length = min(b for b in buckets if b >= n)
    graph, static_ids, static_out = graphs[length]
    static_ids.zero_()
    static_ids[:, :n] = torch.randint(1, args.vocab, (args.batch_size, n), device=DEVICE)
    if graph is None:
        with torch.no_grad():
            static_out = embed(static_ids)
    else:
        graph.replay()
    best = torch.maximum(best, (static_out @ references.T).max(dim=0).values.detach())
    if request % 100 == 0:
        print(f"request {request}: {args.batch_size} queries of {n} tokens through the {length}-token graph",
              flush=True)
with torch.inference_mode():
    for doc in range(args.long_docs):
        windows = torch.randint(1, args.vocab, (args.long_windows, args.long_len), device=DEVICE)
        doc_embedding = F.normalize(embed(windows).mean(dim=0), dim=-1)
        best = torch.maximum(best, references @ doc_embedding)
    print(f"embedded {args.long_docs} long documents eagerly; best similarity {best.max().item():.4f}", flush=True)
finish(args.requests)
