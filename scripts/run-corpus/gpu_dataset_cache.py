"""Training whose dataset caches each decoded batch on the GPU the first time it is read, so that
later epochs skip decoding: the cache grows by one batch every step of the first epoch.
`--cache-device cpu` keeps the cache in host memory and copies each batch over when used.

    python3 gpu_dataset_cache.py --cap-gib G [--cache-device gpu|cpu] [--batch-size 64] [--batches 80]
"""

import argparse
import json
import time

import torch
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--cache-device", default="gpu", choices=["gpu", "cpu"])
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--batches", type=int, default=80, help="distinct batches in the dataset")
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

cache = {}


def read_batch(index):
    """The decoded images of batch `index` (decoding stands in as seeded noise on the GPU)."""
    if index not in cache:
        generator = torch.Generator(device="cuda").manual_seed(index)
        images = torch.rand(args.batch_size, 3, 256, 256, device="cuda", generator=generator)
        cache[index] = images if args.cache_device == "gpu" else images.cpu()
    return cache[index].cuda(non_blocking=True)


model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(64, 128, 3, stride=2, padding=1), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(128, 100)).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
step = 0
for epoch in range(args.epochs):
    for index in range(args.batches):
        images = read_batch(index)
        labels = torch.randint(0, 100, (args.batch_size,), device="cuda")
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 10 == 0:
            print(f"epoch {epoch} step {step} loss {loss.item():.4f} cached {len(cache)}", flush=True)
        step += 1
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": step, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
