"""A convolutional network trained with progressive resizing: the image size grows every few
steps, so each phase asks for blocks a little larger than the ones the last phase freed.

    python3 progressive_resize.py --cap-gib G [--batch-size 64] [--steps-per-size 4]
"""

import argparse
import json
import time

import torch
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--steps-per-size", type=int, default=4)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)


def block(c_in, c_out):
    return torch.nn.Sequential(torch.nn.Conv2d(c_in, c_out, 3, padding=1), torch.nn.BatchNorm2d(c_out),
                               torch.nn.ReLU())


net = torch.nn.Sequential(block(3, 64), block(64, 64), torch.nn.MaxPool2d(2), block(64, 128),
                          block(128, 128), torch.nn.MaxPool2d(2), block(128, 256),
                          torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                          torch.nn.Linear(256, 10)).cuda()
optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
step = 0
for size in range(96, 321, 32):
    for _ in range(args.steps_per_size):
        x = torch.randn(args.batch_size, 3, size, size, device="cuda")
        y = torch.randint(0, 10, (args.batch_size,), device="cuda")
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
    print(f"size {size} step {step} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": step, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
