"""Training a small decoder with a Llama-3-sized vocabulary (128,256 tokens, embeddings tied to the
output layer) under bfloat16 autocast, with activation checkpointing already on for every block
(torch.utils.checkpoint), so the blocks keep only their inputs. The loss is computed the way many
training scripts do it: the logits of every token are upcast to float32 (`logits.float()`) before
the cross-entropy, so the bfloat16 logits, their float32 copy, the log-softmax and then their
gradients are each batch x sequence x vocabulary large. The step runs out at the loss, which
checkpointing does not touch. `--loss-chunks N` computes the head and the loss over N slices of the
tokens, each slice checkpointed (its logits recomputed in the backward pass).

    python3 checkpointed_lm_logits.py --cap-gib G [--loss-chunks 1] [--batch-size 4] [--seq-len 1024]
                                      [--steps 8]
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory
from torch.utils.checkpoint import checkpoint

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--loss-chunks", type=int, default=1)
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--seq-len", type=int, default=1024)
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--depth", type=int, default=12)
parser.add_argument("--vocab", type=int, default=128256)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
d_model, heads, ffn = 768, 12, 2048


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm = torch.nn.RMSNorm(d_model)
        self.qkv = torch.nn.Linear(d_model, 3 * d_model, bias=False)
        self.o = torch.nn.Linear(d_model, d_model, bias=False)
        self.mlp_norm = torch.nn.RMSNorm(d_model)
        self.gate_up = torch.nn.Linear(d_model, 2 * ffn, bias=False)
        self.down = torch.nn.Linear(ffn, d_model, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


with torch.device("cuda"):
    embed = torch.nn.Embedding(args.vocab, d_model)
    blocks = torch.nn.ModuleList([Block() for _ in range(args.depth)])
    final_norm = torch.nn.RMSNorm(d_model)
parameters = [*embed.parameters(), *blocks.parameters(), *final_norm.parameters()]
print(f"{sum(p.numel() for p in parameters) / 1e6:.1f}M parameters, {args.vocab} tokens in the vocabulary",
      flush=True)
optimizer = torch.optim.AdamW(parameters, lr=3e-4, weight_decay=0.1)


def loss_sum(hidden, targets):
    logits = F.linear(final_norm(hidden), embed.weight)  # tied to the embedding
    return F.cross_entropy(logits.float(), targets, reduction="sum")


for step in range(args.steps):
    tokens = torch.randint(0, args.vocab, (args.batch_size, args.seq_len + 1), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        x = embed(tokens[:, :-1])
        for block in blocks:
            x = checkpoint(block, x, use_reentrant=False)
        hidden, targets = x.flatten(0, 1), tokens[:, 1:].flatten()
        if args.loss_chunks == 1:
            total = loss_sum(hidden, targets)
        else:
            total = sum(checkpoint(loss_sum, h, t, use_reentrant=False)
                        for h, t in zip(hidden.chunk(args.loss_chunks), targets.chunk(args.loss_chunks)))
    loss = total / targets.numel()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
