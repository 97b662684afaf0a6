"""An LLM inference server's start-up, as vLLM-style servers do it: after loading a bfloat16 decoder
(8 layers, grouped-query attention, a 128,256-token vocabulary) and allocating a static key/value
cache for --max-capture-batch sequences, it captures the decode step as a CUDA graph for every
batch size it will serve (1, 2, 4, then every multiple of 8 up to --max-capture-batch), largest
first. Each graph is captured into its own private memory pool (torch.cuda.graph's default), and
each pool keeps what its capture allocated, chiefly the step's float32 logits and log-probabilities
over the vocabulary: the pools add up graph after graph and a capture runs out before serving
starts. `--share-pool 1` captures every graph into one pool (safe: the graphs never run at the same
time), as vLLM does; capturing fewer batch sizes makes fewer and smaller pools.

    python3 graph_capture_sizes.py --cap-gib G [--share-pool 0|1] [--max-capture-batch 256]
                                   [--decode-steps 300]
"""

import argparse
import json
import random
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--share-pool", type=int, default=0)
parser.add_argument("--max-capture-batch", type=int, default=256)
parser.add_argument("--max-len", type=int, default=1024, help="context length of the key/value cache")
parser.add_argument("--decode-steps", type=int, default=300)
parser.add_argument("--layers", type=int, default=8)
parser.add_argument("--vocab", type=int, default=128256)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
rng = random.Random(7)
d_model, heads, kv_heads, ffn = 1024, 16, 4, 2816
head_dim = d_model // heads
groups = heads // kv_heads
dtype = torch.bfloat16


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm = torch.nn.RMSNorm(d_model, eps=1e-5)
        self.q = torch.nn.Linear(d_model, d_model, bias=False)
        self.kv = torch.nn.Linear(d_model, 2 * kv_heads * head_dim, bias=False)
        self.o = torch.nn.Linear(d_model, d_model, bias=False)
        self.mlp_norm = torch.nn.RMSNorm(d_model, eps=1e-5)
        self.gate_up = torch.nn.Linear(d_model, 2 * ffn, bias=False)
        self.down = torch.nn.Linear(ffn, d_model, bias=False)


with torch.device("cuda"):  # the weights are made on the GPU, as a checkpoint loader puts them
    embed = torch.nn.Embedding(args.vocab, d_model).to(dtype)
    layers = torch.nn.ModuleList([Layer() for _ in range(args.layers)]).to(dtype)
    final_norm = torch.nn.RMSNorm(d_model, eps=1e-5).to(dtype)
    lm_head = torch.nn.Linear(d_model, args.vocab, bias=False).to(dtype)
max_batch = args.max_capture_batch
# The static cache: [layer, key/value, sequence, kv head, position, channel].
cache = torch.zeros(args.layers, 2, max_batch, kv_heads, args.max_len, head_dim, device="cuda", dtype=dtype)
print(f"weights {sum(p.numel() for m in (embed, layers, final_norm, lm_head) for p in m.parameters()) / 1e6:.0f}M "
      f"parameters, cache {cache.numel() * 2 / 2**30:.2f} GiB", flush=True)


@torch.no_grad()
def decode_step(tokens, positions):
    """One token for each of len(tokens) sequences at `positions`; greedy, with its log-probability."""
    b = tokens.shape[0]
    rows = torch.arange(b, device=tokens.device)
    valid = torch.arange(args.max_len, device=tokens.device)[None, :] <= positions[:, None]
    x = embed(tokens)
    for n, layer in enumerate(layers):
        h = layer.attn_norm(x)
        q = layer.q(h).view(b, kv_heads, groups, head_dim)
        k, v = layer.kv(h).view(b, 2, kv_heads, head_dim).unbind(1)
        cache[n, 0][rows, :, positions] = k
        cache[n, 1][rows, :, positions] = v
        scores = (q @ cache[n, 0, :b].transpose(-1, -2)) * head_dim ** -0.5      # [b, kv_heads, groups, len]
        scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
        attn = scores.softmax(dim=-1, dtype=torch.float32).to(dtype) @ cache[n, 1, :b]
        x = x + layer.o(attn.reshape(b, d_model))
        gate, up = layer.gate_up(layer.mlp_norm(x)).chunk(2, dim=-1)
        x = x + layer.down(F.silu(gate) * up)
    logits = lm_head(final_norm(x)).float()
    log_probs = logits.log_softmax(dim=-1)
    next_tokens = log_probs.argmax(dim=-1)
    return next_tokens, log_probs[rows, next_tokens]


sizes = sorted({1, 2, 4, *range(8, max_batch + 1, 8)}, reverse=True)
pool = torch.cuda.graph_pool_handle() if args.share_pool else None
graphs = {}
side = torch.cuda.Stream()  # warm-up runs on a side stream before each capture
for b in sizes:
    static_tokens = torch.zeros(b, dtype=torch.long, device="cuda")
    static_positions = torch.zeros(b, dtype=torch.long, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            decode_step(static_tokens, static_positions)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        static_out = decode_step(static_tokens, static_positions)
    graphs[b] = (graph, static_tokens, static_positions, static_out)
    if len(graphs) % 4 == 1:
        print(f"captured decode graphs for {len(graphs)} batch sizes (last {b}), "
              f"reserved {torch.cuda.memory_reserved() / 2**30:.2f} GiB", flush=True)
print(f"captured {len(graphs)} decode graphs", flush=True)

# Serving: sequences start at random prompt lengths (their prefill is left out) and decode.
batch = max_batch // 2
positions = torch.tensor([rng.randrange(args.max_len // 16, args.max_len // 2) for _ in range(batch)], device="cuda")
tokens = torch.randint(0, args.vocab, (batch,), device="cuda")
total_log_prob = torch.zeros((), device="cuda")
for step in range(args.decode_steps):
    if step % 50 == 0 and step:
        batch = rng.randint(1, max_batch)  # requests come and go
        positions = torch.tensor([rng.randrange(args.max_len // 16, args.max_len // 2) for _ in range(batch)], device="cuda")
        tokens = torch.randint(0, args.vocab, (batch,), device="cuda")
    size = min(s for s in sizes if s >= batch)
    graph, static_tokens, static_positions, (static_next, static_log_prob) = graphs[size]
    static_tokens[:batch] = tokens
    static_positions[:batch] = positions.clamp(max=args.max_len - 1)
    graph.replay()
    tokens = static_next[:batch].clone()
    total_log_prob += static_log_prob[:batch].sum()
    positions = positions + 1
    if step % 100 == 0:
        print(f"decode step {step}: batch {batch} through the graph for {size}", flush=True)
print(f"mean log-probability {total_log_prob.item() / args.decode_steps:.3f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "graphs": len(graphs), "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
