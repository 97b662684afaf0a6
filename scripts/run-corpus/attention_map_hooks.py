"""A transformer trained with a forward hook that keeps the last block's attention map of every
step for a later plot. The hook appends the map itself (on the GPU, still part of the autograd
graph); `--maps-device cpu` keeps a head-averaged copy on the host instead.

    python3 attention_map_hooks.py --cap-gib G [--maps-device gpu|cpu] [--batch-size 16] [--steps 100]
"""

import argparse
import json
import time

import torch
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--maps-device", default="gpu", choices=["gpu", "cpu"])
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--steps", type=int, default=100)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

d_model, heads, length = 512, 8, 256


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(d_model)
        self.qkv = torch.nn.Linear(d_model, 3 * d_model)
        self.proj = torch.nn.Linear(d_model, d_model)
        self.norm2 = torch.nn.LayerNorm(d_model)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d_model, 4 * d_model), torch.nn.GELU(),
                                       torch.nn.Linear(4 * d_model, d_model))
        self.attention_map = None

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        self.attention_map = (q @ k.transpose(-2, -1) / (d // heads) ** 0.5).softmax(dim=-1)
        y = (self.attention_map @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.norm2(x))


blocks = torch.nn.Sequential(*[Block() for _ in range(4)]).cuda()
head = torch.nn.Linear(d_model, 1).cuda()
optimizer = torch.optim.AdamW(list(blocks.parameters()) + list(head.parameters()), lr=1e-4)
maps = []


def keep_map(module, inputs, output):
    if args.maps_device == "gpu":
        maps.append(module.attention_map)
    else:
        maps.append(module.attention_map.detach().mean(dim=(0, 1)).cpu())


blocks[-1].register_forward_hook(keep_map)
for step in range(args.steps):
    x = torch.randn(args.batch_size, length, d_model, device="cuda")
    loss = head(blocks(x)).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.4f} maps kept {len(maps)}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
