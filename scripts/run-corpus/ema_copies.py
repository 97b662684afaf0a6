"""A diffusion-style denoiser (a transformer over latent patches, trained by flow matching) with
AdamW and, as diffusion training does, exponential moving averages of its weights at two decays,
each a full copy of the weights kept on the GPU and updated after every step. Weights, two
averages, gradients and AdamW's two state tensors: the forward and backward passes fit, the first
`optimizer.step()` runs out making AdamW's state. `--ema-device cpu` keeps the averages in host
memory and updates them from a host copy of the weights. `--optimizer adafactor` keeps factored
second moments and no first moment instead of AdamW's two full-size states (a switch added after
the first run, for the doctor's optimizer-state advice; the failing configuration is unchanged).

    python3 ema_copies.py --cap-gib G [--ema-device gpu|cpu] [--ema-decays 0.999,0.9999]
                          [--optimizer adamw|adafactor] [--batch-size 1] [--steps 6]
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
parser.add_argument("--ema-device", default="gpu", choices=["gpu", "cpu"])
parser.add_argument("--ema-decays", default="0.999,0.9999")
parser.add_argument("--optimizer", default="adamw", choices=["adamw", "adafactor"])
parser.add_argument("--batch-size", type=int, default=1)
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
patches, patch_dim, d_model, depth = 256, 64, 1024, 16


class Denoiser(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(patch_dim, d_model)
        self.position = torch.nn.Parameter(torch.randn(patches, d_model) * 0.02)
        self.time = torch.nn.Sequential(torch.nn.Linear(256, d_model), torch.nn.SiLU(),
                                        torch.nn.Linear(d_model, d_model))
        layer = torch.nn.TransformerEncoderLayer(d_model, 16, 4 * d_model, dropout=0.0, batch_first=True,
                                                 norm_first=True)
        self.blocks = torch.nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(d_model)
        self.out = torch.nn.Linear(d_model, patch_dim)

    def forward(self, x, t):
        frequencies = torch.exp(-math.log(10000.0) * torch.arange(128, device=t.device) / 128)
        angles = t[:, None] * 1000.0 * frequencies[None]
        time_embedding = self.time(torch.cat([angles.sin(), angles.cos()], dim=-1))
        h = self.embed(x) + self.position + time_embedding[:, None]
        return self.out(self.norm(self.blocks(h)))


model = Denoiser().cuda()
parameters = list(model.parameters())
print(f"{sum(p.numel() for p in parameters) / 1e6:.1f}M parameters", flush=True)
decays = [float(d) for d in args.ema_decays.split(",")]
if args.ema_device == "gpu":
    averages = [[p.detach().clone() for p in parameters] for _ in decays]
else:
    averages = [[p.detach().cpu() for p in parameters] for _ in decays]
if args.optimizer == "adafactor":
    optimizer = torch.optim.Adafactor(parameters, lr=1e-4, weight_decay=0.0)
else:
    optimizer = torch.optim.AdamW(parameters, lr=1e-4, weight_decay=0.0)
for step in range(args.steps):
    clean = torch.randn(args.batch_size, patches, patch_dim, device="cuda")
    noise = torch.randn_like(clean)
    t = torch.rand(args.batch_size, device="cuda")
    noisy = (1 - t[:, None, None]) * clean + t[:, None, None] * noise
    loss = F.mse_loss(model(noisy, t), noise - clean)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        source = parameters if args.ema_device == "gpu" else [p.detach().cpu() for p in parameters]
        for decay, average in zip(decays, averages):
            torch._foreach_lerp_(average, source, 1.0 - decay)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
