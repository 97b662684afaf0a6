"""Semantic segmentation training (an encoder-decoder CNN, 21 classes, 256x256 crops) that avoids
a GPU sync per step by deferring its metrics: each step appends a callback, a lambda that updates
the confusion matrix for mean IoU, to a list of pending callbacks, run at the end of the epoch.
The lambda binds that step's logits and masks as default arguments (the usual fix for Python's
late binding in loops), so every pending callback keeps a full-resolution float32 logits tensor
on the GPU until it runs. `--flush-every N` runs the pending callbacks every N steps.

    python3 deferred_metric_closures.py --cap-gib G [--flush-every 0] [--batch-size 8] [--steps 200]
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--flush-every", type=int, default=0, help="run pending metric callbacks every N steps "
                                                               "(0: at the end of the epoch)")
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--crop", type=int, default=256)
parser.add_argument("--steps", type=int, default=200)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
classes = 21


def block(c_in, c_out):
    return torch.nn.Sequential(torch.nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c_out),
                               torch.nn.ReLU(inplace=True))


class SegNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1, self.enc2, self.enc3 = block(3, 32), block(32, 64), block(64, 128)
        self.mid = block(128, 128)
        self.dec3, self.dec2, self.dec1 = block(256, 64), block(128, 32), block(64, 32)
        self.out = torch.nn.Conv2d(32, classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        e3 = self.enc3(F.max_pool2d(e2, 2))
        m = self.mid(F.max_pool2d(e3, 2))
        d3 = self.dec3(torch.cat([F.interpolate(m, scale_factor=2.0), e3], dim=1))
        d2 = self.dec2(torch.cat([F.interpolate(d3, scale_factor=2.0), e2], dim=1))
        d1 = self.dec1(torch.cat([F.interpolate(d2, scale_factor=2.0), e1], dim=1))
        return self.out(d1)


def update_confusion(confusion, logits, masks):
    predictions = logits.argmax(dim=1)
    confusion += torch.bincount(masks.flatten() * classes + predictions.flatten(),
                                minlength=classes * classes).view(classes, classes)


model = SegNet().cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, weight_decay=1e-4)
confusion = torch.zeros(classes, classes, dtype=torch.long, device="cuda")
pending = []
for step in range(args.steps):
    images = torch.randn(args.batch_size, 3, args.crop, args.crop, device="cuda")
    masks = torch.randint(0, classes, (args.batch_size, args.crop, args.crop), device="cuda")
    logits = model(images)
    loss = F.cross_entropy(logits, masks)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    pending.append(lambda logits=logits, masks=masks: update_confusion(confusion, logits, masks))
    if args.flush_every and (step + 1) % args.flush_every == 0:
        for callback in pending:
            callback()
        pending.clear()
    if step % 25 == 0:
        print(f"step {step} pending metric callbacks {len(pending)}", flush=True)
for callback in pending:
    callback()
pending.clear()
iou = confusion.diag() / (confusion.sum(0) + confusion.sum(1) - confusion.diag()).clamp(min=1)
print(f"mean IoU {iou.float().mean().item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
