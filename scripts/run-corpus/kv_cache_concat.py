"""Greedy generation with the key/value cache of every layer kept as one tensor and grown by
`torch.cat` at every token: each token makes a copy one token longer of the whole cache, so the
cache needs its own size again in transit. `--cache prealloc` writes into a cache allocated once
at its final length.

    python3 kv_cache_concat.py --cap-gib G [--cache cat|prealloc] [--new-tokens 768]
"""

import argparse
import json
import time

import torch
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--cache", default="cat", choices=["cat", "prealloc"])
parser.add_argument("--new-tokens", type=int, default=768)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

layers, batch, heads, head_dim, prompt = 8, 64, 16, 64, 512
d_model = heads * head_dim
dtype = torch.bfloat16
torch.manual_seed(0)
qkv = [torch.nn.Linear(d_model, 3 * d_model, device="cuda", dtype=dtype) for _ in range(layers)]
out = [torch.nn.Linear(d_model, d_model, device="cuda", dtype=dtype) for _ in range(layers)]
max_len = prompt + args.new_tokens


@torch.no_grad()
def generate():
    x = torch.randn(batch, prompt, d_model, device="cuda", dtype=dtype)
    # The cache: [layer, key or value, batch, position, head, channel].
    prompt_kv = [torch.stack(qkv[layer](x).view(batch, prompt, 3, heads, head_dim).unbind(2)[1:])
                 for layer in range(layers)]
    if args.cache == "prealloc":
        cache = torch.empty(layers, 2, batch, max_len, heads, head_dim, device="cuda", dtype=dtype)
        for layer, kv in enumerate(prompt_kv):
            cache[layer, :, :, :prompt] = kv
    else:
        cache = torch.stack(prompt_kv)
    del prompt_kv
    length = prompt
    h = x[:, -1:]
    for token in range(args.new_tokens):
        new_kv = []
        for layer in range(layers):
            q, k, v = qkv[layer](h).view(batch, 1, 3, heads, head_dim).unbind(2)
            if args.cache == "prealloc":
                cache[layer, 0, :, length:length + 1] = k
                cache[layer, 1, :, length:length + 1] = v
                keys, values = cache[layer, 0, :, :length + 1], cache[layer, 1, :, :length + 1]
            else:
                new_kv.append(torch.stack([k, v]))
                keys = torch.cat([cache[layer, 0], k], dim=1)
                values = torch.cat([cache[layer, 1], v], dim=1)
            attn = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2))
            h = out[layer](attn.transpose(1, 2).reshape(batch, 1, d_model))
        if args.cache == "cat":
            cache = torch.cat([cache, torch.stack(new_kv)], dim=3)
        length += 1
        if token % 256 == 0:
            print(f"token {token} cache length {length}", flush=True)


generate()
torch.cuda.synchronize()
print(json.dumps({"done": True, "tokens": args.new_tokens, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
