"""Text generation with a key/value cache preallocated per layer for the longest output (as a
static cache does), a prompt prefill and a decode loop, in float16. The caches are made layer by
layer after the weights are loaded.

    python3 prealloc_kv_generate.py --cap-gib G [--batch-size 16] [--max-len 4096] [--prompt-len 1024]
                                    [--new-tokens 64]
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--max-len", type=int, default=4096)
parser.add_argument("--prompt-len", type=int, default=1024)
parser.add_argument("--new-tokens", type=int, default=64)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
layers, d_model, heads, vocab = 8, 2048, 16, 32000
head_dim = d_model // heads
half = dict(device="cuda", dtype=torch.float16)
weights = [{"qkv": torch.randn(3 * d_model, d_model, **half) * 0.02,
            "out": torch.randn(d_model, d_model, **half) * 0.02,
            "up": torch.randn(4 * d_model, d_model, **half) * 0.02,
            "down": torch.randn(d_model, 4 * d_model, **half) * 0.02} for _ in range(layers)]
embedding = torch.randn(vocab, d_model, **half) * 0.02
print("weights loaded", flush=True)
caches = []
for layer in range(layers):
    caches.append(torch.zeros(2, args.batch_size, heads, args.max_len, head_dim, **half))
print(f"key/value caches: {layers} x {caches[0].numel() * 2 / 2**20:.0f} MiB", flush=True)


def forward(tokens, position):
    """Logits of the last position; writes the new keys and values into the caches."""
    x = embedding[tokens]
    b, t, _ = x.shape
    end = position + t
    for w, cache in zip(weights, caches):
        h = F.layer_norm(x, (d_model,))
        q, k, v = (h @ w["qkv"].T).view(b, t, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
        cache[0, :, :, position:end] = k
        cache[1, :, :, position:end] = v
        attention = F.scaled_dot_product_attention(q, cache[0, :, :, :end], cache[1, :, :, :end],
                                                   is_causal=t > 1)
        x = x + attention.transpose(1, 2).reshape(b, t, d_model) @ w["out"].T
        x = x + F.gelu(F.layer_norm(x, (d_model,)) @ w["up"].T) @ w["down"].T
    return F.layer_norm(x[:, -1], (d_model,)) @ embedding.T


with torch.no_grad():
    prompt = torch.randint(0, vocab, (args.batch_size, args.prompt_len), device="cuda")
    next_token = forward(prompt, 0).argmax(dim=-1, keepdim=True)
    print("prefill done", flush=True)
    for step in range(args.new_tokens):
        next_token = forward(next_token, args.prompt_len + step).argmax(dim=-1, keepdim=True)
    print(f"generated {args.new_tokens} tokens, last {next_token[0, 0].item()}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
