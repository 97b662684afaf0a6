"""LoRA fine-tuning of a 1.3B-parameter decoder: the base model's weights are frozen and small
low-rank adapters (rank 16) on the attention projections are trained, under bfloat16 autocast. The
base was loaded in float32, the checkpoint's default, so its weights take 4 bytes per parameter,
and under autocast every frozen matmul casts its weight to bfloat16 and saves that copy for the
backward pass (the gradient of its input needs it): a bfloat16 copy of the whole base builds up
through the forward pass on top of the float32 weights. The weights load; the first forward pass
runs out. `--base-dtype bf16` loads the base in bfloat16 (no casts, half the weights);
`--checkpoint 1` recomputes each block in the backward pass, so no block's weight copies are kept.

    python3 lora_fp32_base.py --cap-gib G [--base-dtype fp32|bf16] [--checkpoint 0|1] [--batch-size 4]
                              [--seq-len 512] [--steps 8]
"""

import argparse
import json
import math
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory
from torch.utils.checkpoint import checkpoint

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--base-dtype", default="fp32", choices=["fp32", "bf16"])
parser.add_argument("--checkpoint", type=int, default=0)
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--seq-len", type=int, default=512)
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--depth", type=int, default=24)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
vocab, d_model, heads, rank = 32000, 2048, 16, 16
base_dtype = torch.float32 if args.base_dtype == "fp32" else torch.bfloat16


class LoRALinear(torch.nn.Module):
    """A frozen linear layer plus a trainable low-rank update: W x + (alpha / r) B A x."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.base = torch.nn.Linear(d_in, d_out, bias=False, device="cuda", dtype=base_dtype)
        self.base.weight.requires_grad_(False)
        self.lora_a = torch.nn.Parameter(torch.empty(rank, d_in, device="cuda"))
        torch.nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))
        self.lora_b = torch.nn.Parameter(torch.zeros(d_out, rank, device="cuda"))

    def forward(self, x):
        return self.base(x) + F.linear(F.linear(x, self.lora_a), self.lora_b) * (32 / rank)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d_model, device="cuda")
        self.qkv = LoRALinear(d_model, 3 * d_model)
        self.proj = LoRALinear(d_model, d_model)
        self.ln2 = torch.nn.LayerNorm(d_model, device="cuda")
        self.up = torch.nn.Linear(d_model, 4 * d_model, bias=False, device="cuda", dtype=base_dtype)
        self.down = torch.nn.Linear(4 * d_model, d_model, bias=False, device="cuda", dtype=base_dtype)
        for p in [*self.ln1.parameters(), *self.ln2.parameters(), *self.up.parameters(), *self.down.parameters()]:
            p.requires_grad_(False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


embed = torch.nn.Embedding(vocab, d_model, device="cuda", dtype=base_dtype).requires_grad_(False)
blocks = torch.nn.ModuleList([Block() for _ in range(args.depth)])
ln_f = torch.nn.LayerNorm(d_model, device="cuda").requires_grad_(False)
modules = [embed, blocks, ln_f]
frozen = sum(p.numel() for m in modules for p in m.parameters() if not p.requires_grad)
adapters = [p for m in modules for p in m.parameters() if p.requires_grad]
print(f"base {frozen / 1e9:.2f}B parameters in {args.base_dtype}, "
      f"adapters {sum(p.numel() for p in adapters) / 1e6:.2f}M trainable", flush=True)
optimizer = torch.optim.AdamW(adapters, lr=2e-4)
for step in range(args.steps):
    tokens = torch.randint(0, vocab, (args.batch_size, args.seq_len + 1), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        x = embed(tokens[:, :-1])
        for block in blocks:
            x = checkpoint(block, x, use_reentrant=False) if args.checkpoint else block(x)
        logits = F.linear(ln_f(x), embed.weight)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
