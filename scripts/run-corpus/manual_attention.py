"""A GPT-style language model trained on long sequences with its attention written out, as older
training code (and nanoGPT without flash attention) does: softmax(QK^T / sqrt(d)) @ V with a causal
mask, which materialises a sequence x sequence matrix per head and saves it for the backward pass.
The first forward pass runs out in the first layer's attention. `--attention sdpa` calls
torch.nn.functional.scaled_dot_product_attention (a fused kernel that works in tiles and keeps no
such matrix); a shorter sequence fits too.

    python3 manual_attention.py --cap-gib G [--attention manual|sdpa] [--seq-len 4096] [--batch-size 2]
                                [--steps 10]
"""

import argparse
import json
import math
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--attention", default="manual", choices=["manual", "sdpa"])
parser.add_argument("--seq-len", type=int, default=4096)
parser.add_argument("--batch-size", type=int, default=2)
parser.add_argument("--steps", type=int, default=10)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = True
vocab, d_model, heads, depth = 8192, 1024, 16, 4


class CausalSelfAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(d_model, 3 * d_model)
        self.proj = torch.nn.Linear(d_model, d_model)
        if args.attention == "manual":
            self.register_buffer("causal", torch.ones(args.seq_len, args.seq_len, dtype=torch.bool).tril(),
                                 persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
        if args.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(~self.causal[:t, :t], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, d))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention()
        self.ln2 = torch.nn.LayerNorm(d_model)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d_model, 4 * d_model), torch.nn.GELU(),
                                       torch.nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, d_model)
        self.positions = torch.nn.Embedding(args.seq_len, d_model)
        self.blocks = torch.nn.Sequential(*[Block() for _ in range(depth)])
        self.ln = torch.nn.LayerNorm(d_model)
        self.head = torch.nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied, as GPT-2 does

    def forward(self, idx):
        positions = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tokens(idx) + self.positions(positions))))


model = GPT().cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
for step in range(args.steps):
    tokens = torch.randint(0, vocab, (args.batch_size, args.seq_len + 1), device="cuda")
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
