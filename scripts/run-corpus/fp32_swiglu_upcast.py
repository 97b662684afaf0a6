"""Masked-language-model pretraining of a protein language model (a pre-norm transformer encoder over
1024-residue sequences, 12 blocks of width 512 with SwiGLU feed-forward layers) under bfloat16
autocast. The feed-forward's gating is a hand-written op that, "for numerical stability", turns
autocast off and computes silu(gate) * up in float32 from upcast copies of its inputs: every
block then saves float32 copies of its 2048-wide gate and up projections and of the sigmoid and
its product for the backward pass, nearly twice the bytes of the same op in bfloat16, and the
feed-forward's activations dominate the model. The first forward/backward pass runs out.
`--upcast 0` runs the op in the autocast dtype; `--checkpoint 1` recomputes each block in the
backward pass; a smaller batch saves fewer activations.

    python3 fp32_swiglu_upcast.py --cap-gib G [--upcast 0|1] [--checkpoint 0|1] [--batch-size 16]
                                  [--seq-len 1024] [--steps 8]
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
parser.add_argument("--upcast", type=int, default=1)
parser.add_argument("--checkpoint", type=int, default=0)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--seq-len", type=int, default=1024)
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--depth", type=int, default=12)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
alphabet, mask_id, d_model, heads, hidden = 33, 32, 512, 8, 2048


def swiglu(gate, up):
    """silu(gate) * up, written out; upcast to float32 outside autocast unless --upcast 0."""
    if args.upcast:
        with torch.autocast("cuda", enabled=False):
            gate, up = gate.float(), up.float()
            return gate * torch.sigmoid(gate) * up
    return gate * torch.sigmoid(gate) * up


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm = torch.nn.LayerNorm(d_model, bias=False)
        self.qkv = torch.nn.Linear(d_model, 3 * d_model, bias=False)
        self.o = torch.nn.Linear(d_model, d_model, bias=False)
        self.ffn_norm = torch.nn.LayerNorm(d_model, bias=False)
        self.gate_up = torch.nn.Linear(d_model, 2 * hidden, bias=False)
        self.down = torch.nn.Linear(hidden, d_model, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
        gate, up = self.gate_up(self.ffn_norm(x)).chunk(2, dim=-1)
        return x + self.down(swiglu(gate, up))


with torch.device("cuda"):
    embed = torch.nn.Embedding(alphabet, d_model)
    blocks = torch.nn.ModuleList([Block() for _ in range(args.depth)])
    final_norm = torch.nn.LayerNorm(d_model, bias=False)
    head = torch.nn.Linear(d_model, alphabet)
modules = [embed, blocks, final_norm, head]
parameters = [p for m in modules for p in m.parameters()]
print(f"{sum(p.numel() for p in parameters) / 1e6:.1f}M parameters", flush=True)
optimizer = torch.optim.AdamW(parameters, lr=4e-4, weight_decay=0.01)
for step in range(args.steps):
    residues = torch.randint(4, 24, (args.batch_size, args.seq_len), device="cuda")
    masked = torch.rand(residues.shape, device="cuda") < 0.15
    with torch.autocast("cuda", dtype=torch.bfloat16):
        x = embed(residues.masked_fill(masked, mask_id))
        for block in blocks:
            x = checkpoint(block, x, use_reentrant=False) if args.checkpoint else block(x)
        logits = head(final_norm(x))
    loss = F.cross_entropy(logits[masked].float(), residues[masked])
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
