"""Greedy generation with a key/value cache grown by `torch.cat` at every token: each step makes
a copy one token longer of every layer's cache, so the cache needs its own size again in
transit. `--cache prealloc` writes into a cache allocated once at its final length.

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
    caches = []
    for layer in range(layers):
        q, k, v = qkv[layer](x).view(batch, -1, 3, heads, head_dim).unbind(2)
        if args.cache == "prealloc":
            kc = torch.empty(batch, max_len, heads, head_dim, device="cuda", dtype=dtype)
            vc = torch.empty_like(kc)
            kc[:, :prompt] = k
            vc[:, :prompt] = v
        else:
            kc, vc = k.contiguous(), v.contiguous()
        caches.append([kc, vc])
    length = prompt
    h = x[:, -1:]
    for token in range(args.new_tokens):
        for layer in range(layers):
            q, k, v = qkv[layer](h).view(batch, 1, 3, heads, head_dim).unbind(2)
            kc, vc = caches[layer]
            if args.cache == "prealloc":
                kc[:, length:length + 1] = k
                vc[:, length:length + 1] = v
                keys, values = kc[:, :length + 1], vc[:, :length + 1]
            else:
                kc = torch.cat([kc, k], dim=1)
                vc = torch.cat([vc, v], dim=1)
                caches[layer] = [kc, vc]
                keys, values = kc, vc
            attn = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2))
            h = out[layer](attn.transpose(1, 2).reshape(batch, 1, d_model))
        length += 1
        if token % 256 == 0:
            print(f"token {token} cache length {length}", flush=True)


generate()
torch.cuda.synchronize()
print(json.dumps({"done": True, "tokens": args.new_tokens, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
