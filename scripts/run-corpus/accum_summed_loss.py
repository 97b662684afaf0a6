"""Gradient accumulation done by summing the losses: a GPT-2-small-sized language model (12 blocks of
width 768) trained under bfloat16 autocast on --accum-steps micro-batches per optimizer step, where
the loop adds each micro-batch's loss to a running total and calls `total.backward()` once per
window. Every micro-batch's autograd graph, with its saved activations, its bfloat16 weight copies
and its float32 log-softmax over the vocabulary, stays alive until that one backward pass, so the
window holds the activations of its whole batch, which accumulation was meant to avoid: the first
window runs out a few micro-batches in. `--backward-each 1` calls backward on each micro-batch's
share of the loss as it comes (the gradients accumulate in .grad), so one micro-batch's graph is
alive at a time.

    python3 accum_summed_loss.py --cap-gib G [--backward-each 0|1] [--accum-steps 8] [--micro-batch 4]
                                 [--seq-len 512] [--windows 4]
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--backward-each", type=int, default=0)
parser.add_argument("--accum-steps", type=int, default=8)
parser.add_argument("--micro-batch", type=int, default=4)
parser.add_argument("--seq-len", type=int, default=512)
parser.add_argument("--windows", type=int, default=4, help="optimizer steps")
parser.add_argument("--depth", type=int, default=12)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
vocab, d_model, heads = 50304, 768, 12


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d_model)
        self.qkv = torch.nn.Linear(d_model, 3 * d_model)
        self.proj = torch.nn.Linear(d_model, d_model)
        self.ln2 = torch.nn.LayerNorm(d_model)
        self.fc = torch.nn.Linear(d_model, 4 * d_model)
        self.out = torch.nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


with torch.device("cuda"):
    wte = torch.nn.Embedding(vocab, d_model)
    wpe = torch.nn.Embedding(args.seq_len, d_model)
    blocks = torch.nn.ModuleList([Block() for _ in range(args.depth)])
    ln_f = torch.nn.LayerNorm(d_model)
parameters = [p for m in (wte, wpe, blocks, ln_f) for p in m.parameters()]
print(f"{sum(p.numel() for p in parameters) / 1e6:.1f}M parameters", flush=True)
optimizer = torch.optim.AdamW(parameters, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
positions = torch.arange(args.seq_len, device="cuda")


def micro_batch_loss():
    tokens = torch.randint(0, vocab, (args.micro_batch, args.seq_len + 1), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        x = wte(tokens[:, :-1]) + wpe(positions)
        for block in blocks:
            x = block(x)
        logits = F.linear(ln_f(x), wte.weight)
    return F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())


for window in range(args.windows):
    total = torch.zeros((), device="cuda")
    for micro in range(args.accum_steps):
        loss = micro_batch_loss() / args.accum_steps
        if args.backward_each:
            loss.backward()
            total += loss.detach()
        else:
            total = total + loss
        print(f"window {window} micro-batch {micro}", flush=True)
    if not args.backward_each:
        total.backward()
    torch.nn.utils.clip_grad_norm_(parameters, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"window {window} loss {total.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "windows": args.windows, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
