"""A classifier trained with a metrics log: every step appends a dict of metrics (the loss, the
predictions' entropy and their mean confidence) to a history list, for a plot at the end. The
metrics are kept as tensors: entropy and confidence are computed from the logits with autograd
on and never backpropagated, so each entry keeps that step's softmax outputs alive on the GPU
(the loss's own saved tensors go with its backward). `--log-item 1` logs Python floats
(`.item()`) instead.

    python3 metrics_history.py --cap-gib G [--log-item 0|1] [--batch-size 512] [--steps 300]
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--log-item", type=int, default=0)
parser.add_argument("--batch-size", type=int, default=512)
parser.add_argument("--steps", type=int, default=300)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
features, width, classes = 1024, 4096, 4096
net = torch.nn.Sequential(torch.nn.Linear(features, width), torch.nn.ReLU(),
                          torch.nn.Linear(width, width), torch.nn.ReLU(),
                          torch.nn.Linear(width, width), torch.nn.ReLU(),
                          torch.nn.Linear(width, classes)).cuda()
optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
history = []


def number(value):
    return value.item() if torch.is_tensor(value) else value


for step in range(args.steps):
    x = torch.randn(args.batch_size, features, device="cuda")
    y = torch.randint(0, classes, (args.batch_size,), device="cuda")
    logits = net(x)
    loss = F.cross_entropy(logits, y)
    log_probs = logits.log_softmax(dim=-1)
    probs = log_probs.exp()
    metrics = {"loss": loss, "entropy": -(probs * log_probs).sum(dim=-1).mean(),
               "confidence": probs.max(dim=-1).values.mean()}
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if args.log_item:
        metrics = {name: value.item() for name, value in metrics.items()}
    history.append(metrics)
    if step % 20 == 0:
        print(f"step {step} loss {number(metrics['loss']):.4f} entropy {number(metrics['entropy']):.3f}",
              flush=True)
mean_entropy = sum(number(m["entropy"]) for m in history) / len(history)
print(f"mean entropy over {len(history)} steps {mean_entropy:.3f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
