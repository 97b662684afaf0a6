"""A text-generation server with continuous batching over long-context requests (retrieval-augmented
prompts of 768-1536 tokens, 32-256 new tokens each by default), in bfloat16: up to --max-batch requests
decode together, and a finished request's place goes to the next one in the queue. Each request
keeps its own key/value cache (per layer, as its prefill returned it). At every decode step the
server collates the running requests' caches into one left-padded batch (past_key_values for all
layers), the model returns each layer's cache one token longer (torch.cat), and the server hands
each request a view of its row. At the step's peak the requests' previous caches (views that keep
the last step's batched caches alive), the collated batch and the new batched caches are alive
together, each as large as the batch's padded cache. `--cache slots` preallocates one cache for
--max-batch requests at the longest length and writes each token in place, as paged/static caches
do; a shorter context (`--max-context`) or fewer concurrent requests shrink the batch's cache.

    python3 continuous_batching_kv.py --cap-gib G [--cache collate|slots] [--max-batch 48]
                                      [--max-context 1536] [--max-new-tokens 256] [--requests 96]
"""

import argparse
import collections
import json
import random
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--cache", default="collate", choices=["collate", "slots"])
parser.add_argument("--max-batch", type=int, default=48, help="requests decoded together")
parser.add_argument("--max-context", type=int, default=1536, help="prompts are cut to their last N tokens")
parser.add_argument("--max-new-tokens", type=int, default=256)
parser.add_argument("--requests", type=int, default=96)
parser.add_argument("--layers", type=int, default=8)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
rng = random.Random(5)
vocab, d_model, heads = 32000, 1024, 16
head_dim = d_model // heads
dtype = torch.bfloat16


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d_model)
        self.qkv = torch.nn.Linear(d_model, 3 * d_model)
        self.out = torch.nn.Linear(d_model, d_model)
        self.ln2 = torch.nn.LayerNorm(d_model)
        self.fc1 = torch.nn.Linear(d_model, 4 * d_model)
        self.fc2 = torch.nn.Linear(4 * d_model, d_model)

    def project(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
        return q, k, v

    def finish(self, x, attn):
        b, _, t, _ = attn.shape
        x = x + self.out(attn.transpose(1, 2).reshape(b, t, d_model))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


with torch.device("cuda"):
    embed = torch.nn.Embedding(vocab, d_model).to(dtype)
    layers = torch.nn.ModuleList([Layer() for _ in range(args.layers)]).to(dtype)
    ln_f = torch.nn.LayerNorm(d_model).to(dtype)


def logits_of(x):
    return F.linear(ln_f(x), embed.weight)


class Request:
    def __init__(self, prompt_len, new_tokens):
        self.prompt = torch.randint(0, vocab, (1, prompt_len), device="cuda")
        self.new_tokens = new_tokens
        self.generated = 0
        self.length = prompt_len
        self.cache = None  # collate: [(k, v) per layer], each [heads, length, head_dim]
        self.slot = None


max_len = args.max_context + args.max_new_tokens
if args.cache == "slots":
    # [layer, key/value, slot, head, position, channel]
    slots = torch.zeros(args.layers, 2, args.max_batch, heads, max_len, head_dim, device="cuda", dtype=dtype)
    free_slots = list(range(args.max_batch))
    slot_lengths = torch.zeros(args.max_batch, dtype=torch.long, device="cuda")


@torch.no_grad()
def prefill(request):
    x = embed(request.prompt)
    cache = []
    for layer in layers:
        q, k, v = layer.project(x)
        x = layer.finish(x, F.scaled_dot_product_attention(q, k, v, is_causal=True))
        if args.cache == "slots":
            slots[len(cache), 0, request.slot, :, :request.length] = k[0]
            slots[len(cache), 1, request.slot, :, :request.length] = v[0]
            cache.append(None)
        else:
            cache.append((k[0].contiguous(), v[0].contiguous()))
    if args.cache == "collate":
        request.cache = cache
    return logits_of(x[:, -1]).argmax(dim=-1)


@torch.no_grad()
def decode_collated(running, tokens):
    """One decode step over the running requests' own caches, left-padded into a batch."""
    b, longest = len(running), max(r.length for r in running)
    past = []
    for index in range(len(layers)):
        keys = torch.zeros(b, heads, longest, head_dim, device="cuda", dtype=dtype)
        values = torch.zeros_like(keys)
        for i, r in enumerate(running):
            keys[i, :, longest - r.length:] = r.cache[index][0]
            values[i, :, longest - r.length:] = r.cache[index][1]
        past.append((keys, values))
    lengths = torch.tensor([r.length for r in running], device="cuda")
    mask = (torch.arange(longest + 1, device="cuda") >= longest - lengths[:, None])[:, None, None, :]
    x = embed(tokens[:, None])
    present = []
    for layer, (past_k, past_v) in zip(layers, past):
        q, k, v = layer.project(x)
        keys, values = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        present.append((keys, values))
        x = layer.finish(x, F.scaled_dot_product_attention(q, keys, values, attn_mask=mask))
    del past
    for i, r in enumerate(running):
        r.cache = [(keys[i, :, longest - r.length:], values[i, :, longest - r.length:]) for keys, values in present]
    return logits_of(x[:, -1]).argmax(dim=-1)


@torch.no_grad()
def decode_slots(running, tokens):
    """One decode step writing each request's new key and value into its preallocated slot."""
    top = max(r.slot for r in running) + 1
    step_tokens = torch.zeros(top, dtype=torch.long, device="cuda")
    index = torch.tensor([r.slot for r in running], device="cuda")
    step_tokens[index] = tokens
    positions = slot_lengths[:top]
    longest = max(r.length for r in running) + 1
    mask = (torch.arange(longest, device="cuda") <= positions[:, None])[:, None, None, :]
    rows = torch.arange(top, device="cuda")
    x = embed(step_tokens[:, None])
    for n, layer in enumerate(layers):
        q, k, v = layer.project(x)
        slots[n, 0][rows, :, positions] = k[:, :, 0]
        slots[n, 1][rows, :, positions] = v[:, :, 0]
        attn = F.scaled_dot_product_attention(q, slots[n, 0, :top, :, :longest], slots[n, 1, :top, :, :longest],
                                              attn_mask=mask)
        x = layer.finish(x, attn)
    slot_lengths[index] += 1
    return logits_of(x[:, -1]).argmax(dim=-1)[index]


queue = collections.deque()
for _ in range(args.requests):
    prompt_len = min(rng.randint(768, 1536), args.max_context)
    queue.append(Request(prompt_len, rng.randint(max(1, args.max_new_tokens // 8), args.max_new_tokens)))
running, tokens, steps, served, generated = [], None, 0, 0, 0
while queue or running:
    admitted = []
    while queue and len(running) + len(admitted) < args.max_batch:
        r = queue.popleft()
        if args.cache == "slots":
            r.slot = free_slots.pop(0)
            slot_lengths[r.slot] = r.length
        admitted.append((r, prefill(r)))
    if admitted:
        firsts = torch.cat([t for _, t in admitted])
        tokens = firsts if tokens is None else torch.cat([tokens, firsts])
        running += [r for r, _ in admitted]
    tokens = (decode_collated if args.cache == "collate" else decode_slots)(running, tokens)
    for r in running:
        r.length += 1
        r.generated += 1
    generated += len(running)
    keep = [i for i, r in enumerate(running) if r.generated < r.new_tokens]
    for r in running:
        if r.generated >= r.new_tokens:
            served += 1
            r.cache = None
            if args.cache == "slots":
                free_slots.append(r.slot)
                free_slots.sort()
                slot_lengths[r.slot] = 0
    running = [running[i] for i in keep]
    tokens = tokens[torch.tensor(keep, dtype=torch.long, device="cuda")]
    if steps % 50 == 0:
        longest = max((r.length for r in running), default=0)
        print(f"decode step {steps}: {len(running)} running, longest {longest} tokens, {served} served",
              flush=True)
    steps += 1
print(f"served {served} requests, {generated} tokens in {steps} decode steps", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
