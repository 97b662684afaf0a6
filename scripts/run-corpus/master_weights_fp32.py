"""Mixed-precision training done by hand, the classic way: the model runs forward and backward in
bfloat16 while the optimizer (AdamW) updates float32 master copies of the weights, which are
copied back into the bfloat16 model after each step. Per parameter that is 2 bytes of bfloat16
weight, 4 of master weight, 2 of bfloat16 gradient, 4 of float32 gradient and 8 of AdamW state:
the forward and backward passes fit, and the first update runs out making the float32 gradients
and AdamW's state. `--precision bf16` trains the bfloat16 weights directly (AdamW's state then is
bfloat16 too: 8 bytes per parameter in all).

    python3 master_weights_fp32.py --cap-gib G [--precision master|bf16] [--batch-size 512] [--steps 10]
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--precision", default="master", choices=["master", "bf16"])
parser.add_argument("--batch-size", type=int, default=512)
parser.add_argument("--steps", type=int, default=10)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
width, depth = 4096, 12


class Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(width, width)

    def forward(self, x):
        return x + F.gelu(self.linear(x))


model = torch.nn.Sequential(*[Residual() for _ in range(depth)]).cuda().to(torch.bfloat16)
weights = list(model.parameters())
if args.precision == "master":
    masters = [p.detach().float().requires_grad_() for p in weights]
    optimizer = torch.optim.AdamW(masters, lr=1e-4)
else:
    optimizer = torch.optim.AdamW(weights, lr=1e-4)
for step in range(args.steps):
    x = torch.randn(args.batch_size, width, device="cuda", dtype=torch.bfloat16)
    target = torch.randn(args.batch_size, width, device="cuda", dtype=torch.bfloat16)
    loss = F.mse_loss(model(x).float(), target.float())
    loss.backward()
    if args.precision == "master":
        for master, p in zip(masters, weights):
            master.grad = p.grad.float()
        optimizer.step()
        with torch.no_grad():
            for master, p in zip(masters, weights):
                p.copy_(master)
        optimizer.zero_grad(set_to_none=True)
        model.zero_grad(set_to_none=True)
    else:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
