"""A convolutional network trained in float32; `--precision bf16` runs the forward pass under
bfloat16 autocast, which halves most saved activations.

    python3 conv_precision.py --cap-gib G [--precision fp32|bf16] [--batch-size 32] [--steps 20]
"""

import argparse
import json
import time

import torch
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

layers = []
channels = 3
for c in [64, 128, 128, 256]:
    layers += [torch.nn.Conv2d(channels, c, 3, padding=1), torch.nn.GELU(), torch.nn.Conv2d(c, c, 3, padding=1),
               torch.nn.GELU()]
    channels = c
net = torch.nn.Sequential(*layers, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                          torch.nn.Linear(channels, 10)).cuda()
optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
for step in range(args.steps):
    x = torch.randn(args.batch_size, 3, 224, 224, device="cuda")
    y = torch.randint(0, 10, (args.batch_size,), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
        loss = torch.nn.functional.cross_entropy(net(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
