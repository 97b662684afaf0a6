"""Beam search with a decoder whose key/value cache is passed in and returned as a tuple of
per-layer tensors (the "past_key_values" of older generation code): each forward pass makes every
layer's keys and values one token longer with `torch.cat` while the caller still holds the old
tuple, and each beam step reorders the returned cache by the chosen beams with `index_select`, a
copy of the whole cache again. The cache is thus held twice at every token. `--cache prealloc`
writes into caches allocated once per layer at the final length and reorders them in place, one
layer at a time.

    python3 beam_search_past.py --cap-gib G [--cache cat|prealloc] [--batch-size 16] [--beams 4]
                                [--prompt-len 256] [--new-tokens 768]
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--cache", default="cat", choices=["cat", "prealloc"])
parser.add_argument("--batch-size", type=int, default=16, help="prompts")
parser.add_argument("--beams", type=int, default=4)
parser.add_argument("--prompt-len", type=int, default=256)
parser.add_argument("--new-tokens", type=int, default=768)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
layers, d_model, heads, vocab = 8, 1024, 16, 32000
head_dim = d_model // heads
half = dict(device="cuda", dtype=torch.bfloat16)
weights = [{"qkv": torch.randn(3 * d_model, d_model, **half) * 0.02,
            "out": torch.randn(d_model, d_model, **half) * 0.02,
            "up": torch.randn(4 * d_model, d_model, **half) * 0.02,
            "down": torch.randn(d_model, 4 * d_model, **half) * 0.02} for _ in range(layers)]
embedding = torch.randn(vocab, d_model, **half) * 0.02
rows = args.batch_size * args.beams
max_len = args.prompt_len + args.new_tokens
caches = []
if args.cache == "prealloc":
    caches = [torch.empty(2, rows, heads, max_len, head_dim, **half) for _ in range(layers)]
print("weights loaded", flush=True)


def attend(q, k, v):
    """Attention written out: q [rows, heads, t, dim] over k, v [rows, heads, length, dim]."""
    scores = (q @ k.transpose(-1, -2)) * head_dim ** -0.5
    t, length = q.shape[2], k.shape[2]
    if t > 1:
        future = torch.ones(t, length, dtype=torch.bool, device="cuda").triu(length - t + 1)
        scores = scores.masked_fill(future, float("-inf"))
    return scores.softmax(dim=-1) @ v


def forward(tokens, position, past):
    """Logits of the last position. With --cache cat, `past` is a tuple of (keys, values) per
    layer and the new, longer tuple is returned; with prealloc the caches are written in place."""
    x = embedding[tokens]
    n, t, _ = x.shape
    end = position + t
    present = []
    for layer, w in enumerate(weights):
        h = F.layer_norm(x, (d_model,))
        q, k, v = (h @ w["qkv"].T).view(n, t, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
        if args.cache == "cat":
            if past is not None:
                k = torch.cat([past[layer][0], k], dim=2)
                v = torch.cat([past[layer][1], v], dim=2)
            present.append((k, v))
        else:
            cache = caches[layer]
            cache[0, :, :, position:end] = k
            cache[1, :, :, position:end] = v
            k, v = cache[0, :, :, :end], cache[1, :, :, :end]
        y = attend(q, k, v)
        x = x + y.transpose(1, 2).reshape(n, t, d_model) @ w["out"].T
        x = x + F.gelu(F.layer_norm(x, (d_model,)) @ w["up"].T) @ w["down"].T
    logits = (F.layer_norm(x[:, -1], (d_model,)) @ embedding.T).float()
    return logits, tuple(present)


def reorder(past, beam_idx, length):
    """The cache of the chosen beams, in their new order."""
    if args.cache == "cat":
        return tuple((k.index_select(0, beam_idx), v.index_select(0, beam_idx)) for k, v in past)
    for cache in caches:
        cache[:, :, :, :length] = cache[:, :, :, :length].index_select(1, beam_idx)
    return past


with torch.no_grad():
    prompt = torch.randint(0, vocab, (args.batch_size, args.prompt_len), device="cuda")
    prompt = prompt.repeat_interleave(args.beams, dim=0)
    beam_scores = torch.zeros(args.batch_size, args.beams, device="cuda")
    beam_scores[:, 1:] = -1e9  # all beams start equal: keep one until they diverge
    beam_scores = beam_scores.view(-1)
    offsets = (torch.arange(args.batch_size, device="cuda") * args.beams)[:, None]
    generated = torch.empty(rows, 0, dtype=torch.long, device="cuda")
    logits, past = forward(prompt, 0, None)
    print("prefill done", flush=True)
    for step in range(args.new_tokens):
        scores = (beam_scores[:, None] + logits.log_softmax(dim=-1)).view(args.batch_size, -1)
        top_scores, top_index = scores.topk(args.beams, dim=1)
        beam_idx = (top_index // vocab + offsets).view(-1)
        next_tokens = (top_index % vocab).view(-1, 1)
        beam_scores = top_scores.view(-1)
        generated = torch.cat([generated.index_select(0, beam_idx), next_tokens], dim=1)
        past = reorder(past, beam_idx, args.prompt_len + step)
        logits, past = forward(next_tokens, args.prompt_len + step, past)
        if step % 64 == 0:
            print(f"step {step} cache length {args.prompt_len + step + 1} best score "
                  f"{beam_scores.max().item():.2f}", flush=True)
    best = beam_scores.view(args.batch_size, args.beams).argmax(dim=1)
    best_rows = best + offsets[:, 0]
    print(f"generated {args.new_tokens} tokens; best beams' first tokens "
          f"{generated[best_rows, :6].tolist()[0]}, token sum {generated[best_rows].sum().item()}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "tokens": args.new_tokens, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
