"""Pre-training a small ALiBi decoder language model on length-bucketed batches, with the
attention masks memoised per sequence length by functools.lru_cache.

Scenario: a GPT-style decoder (8 layers, width 512, 16 heads, 32k vocabulary) with ALiBi
attention biases instead of position embeddings, trained under bfloat16 autocast. Batches
are grouped by length: each batch of 4 documents is padded to its longest document, rounded up
to a multiple of 16 tokens, so the sequence length changes from step to step (256 to 2,048).
Attention uses F.scaled_dot_product_attention with the causal ALiBi bias as a float mask, which
the helper materialises as a contiguous [batch, heads, length, length] bfloat16 tensor.

Mistake: building the mask every step looked wasteful, so the helper is decorated with
`@functools.lru_cache(maxsize=None)`, keyed by (batch, length, ...). Every new batch length adds
a mask of up to 4 x 16 x 2,048 x 2,048 x 2 B = 0.5 GB on the GPU that the cache keeps forever:
memory grows step after step until the job runs out. `--mask-cache max-length` builds one mask
for the longest length and slices it for each batch, as MPT does (`--mask-cache none` rebuilds
it each step).

Memory (per step, batch 4 x L tokens):
  parameters 41.6M x 4 B = 0.17 GB, gradients 0.17 GB, AdamW state 0.33 GB.
  activations at L = 2,048: ~1.2 GB in the layers, ~2 GB for the bfloat16/float32 logits, their
  log-softmax and gradient over 32k tokens.
  cap_from (--mask-cache max-length): + one 0.54 GB mask: peak allocated ~4.4 GB; the cap is
  2.0 x that (~8.8 GB).
  own (per-length, unbounded lru_cache): + 16 x L^2 x 8 B for each new length, 0.2 GB on average
  (113 possible lengths; ~45 distinct ones in 70 steps): the cache passes the ~4.4 GB of
  headroom after about 25 new lengths, around step 30: a leak that fails within the run.

    python3 alibi_mask_lru_cache.py --cap-gib G [--mask-cache per-length|max-length|none]
        [--batch-size 4] [--max-len 2048] [--layers 8] [--width 512] [--steps 70]
"""

import argparse
import functools
import math
import random

import torch
import torch.nn.functional as F

from corpus_job import DEVICE, finish, parse_args

parser = argparse.ArgumentParser()
parser.add_argument("--mask-cache", default="per-length", choices=["per-length", "max-length", "none"],
                    help="per-length: lru_cache(maxsize=None) per batch length; max-length: one mask, sliced")
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--min-len", type=int, default=256)
parser.add_argument("--max-len", type=int, default=2048)
parser.add_argument("--layers", type=int, default=8)
parser.add_argument("--width", type=int, default=512)
parser.add_argument("--heads", type=int, default=16)
parser.add_argument("--vocab", type=int, default=32000)
parser.add_argument("--steps", type=int, default=70)
args = parse_args(parser)

torch.manual_seed(0)
rng = random.Random(0)


def alibi_slopes(heads):
    start = 2 ** (-8 / heads)
    return torch.tensor([start ** (i + 1) for i in range(heads)])


def build_causal_alibi_mask(batch, length, heads, device):
    """ALiBi bias with the causal mask folded in: [batch, heads, length, length] bfloat16 (the
    fused kernel is given a contiguous 4-D mask)."""
    pos = torch.arange(length, device=device)
    distance = (pos[None, :] - pos[:, None]).float()                  # key - query
    bias = alibi_slopes(heads).to(device)[:, None, None] * distance   # [heads, length, length]
    bias = bias.masked_fill(distance > 0, float("-inf"))
    return bias.to(torch.bfloat16).expand(batch, heads, length, length).contiguous()


@functools.lru_cache(maxsize=None)
def cached_causal_alibi_mask(batch, length, heads, device):
    return build_causal_alibi_mask(batch, length, heads, device)


_longest = {}


def attention_mask(batch, length):
    if args.mask_cache == "per-length":
        return cached_causal_alibi_mask(batch, length, args.heads, DEVICE)
    if args.mask_cache == "none":
        return build_causal_alibi_mask(batch, length, args.heads, DEVICE)
    if batch not in _longest:
        _longest[batch] = build_causal_alibi_mask(batch, args.max_len, args.heads, DEVICE)
    return _longest[batch][:, :, :length, :length]


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(args.width)
        self.qkv = torch.nn.Linear(args.width, 3 * args.width, bias=False)
        self.proj = torch.nn.Linear(args.width, args.width, bias=False)
        self.ln2 = torch.nn.LayerNorm(args.width)
        self.fc = torch.nn.Linear(args.width, 4 * args.width, bias=False)
        self.out = torch.nn.Linear(4 * args.width, args.width, bias=False)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, args.heads, d // args.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class AlibiLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(args.vocab, args.width)
        self.blocks = torch.nn.ModuleList([Block() for _ in range(args.layers)])
        self.ln_f = torch.nn.LayerNorm(args.width)

    def forward(self, ids):
        mask = attention_mask(ids.shape[0], ids.shape[1])
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, mask)
        return self.ln_f(x) @ self.embed.weight.T


model = AlibiLM().to(DEVICE)
for name, p in model.named_parameters():  # GPT-2's initialisation
    if p.dim() == 2:
        torch.nn.init.normal_(p, std=0.02)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, masks: {args.mask_cache}", flush=True)
for step in range(args.steps):
    longest = int(args.min_len * (args.max_len / args.min_len) ** rng.random())
    length = min(args.max_len, int(math.ceil(longest / 16) * 16))
    ids = torch.randint(0, args.vocab, (args.batch_size, length + 1), device=DEVICE)
    with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
        logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if step % 5 == 0:
        cached = cached_causal_alibi_mask.cache_info().currsize
        print(f"step {step}: length {length}, loss {loss.item():.4f}, cached masks {cached}", flush=True)
finish(args.steps)
