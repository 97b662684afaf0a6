"""A dense one-stage object detector (a convolutional backbone, a feature pyramid, and
classification and box heads shared across pyramid levels, as RetinaNet has) trained with
multi-scale augmentation: each batch's images are resized so that the shorter side is one of
480..800 pixels at a random aspect ratio and orientation, then padded to a multiple of 32, so
every batch has its own height and width and every activation a new size.

    python3 multiscale_detection.py --cap-gib G [--batch-size 16] [--steps 40]
"""

import argparse
import json
import random
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--steps", type=int, default=40)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

rng = random.Random(17)
torch.manual_seed(17)
classes, anchors, fpn = 20, 9, 128


def conv_bn(c_in, c_out, stride=1):
    return torch.nn.Sequential(torch.nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
                               torch.nn.BatchNorm2d(c_out), torch.nn.ReLU())


def stage(c_in, c_out):
    return torch.nn.Sequential(conv_bn(c_in, c_out, stride=2), conv_bn(c_out, c_out))


class Detector(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = conv_bn(3, 32, stride=2)
        self.stages = torch.nn.ModuleList([stage(32, 64), stage(64, 128), stage(128, 256), stage(256, 256)])
        self.lateral = torch.nn.ModuleList([torch.nn.Conv2d(c, fpn, 1) for c in (128, 256, 256)])
        self.smooth = torch.nn.ModuleList([torch.nn.Conv2d(fpn, fpn, 3, padding=1) for _ in range(3)])
        self.extra = torch.nn.Conv2d(fpn, fpn, 3, stride=2, padding=1)

        def tower(out_channels):
            return torch.nn.Sequential(torch.nn.Conv2d(fpn, fpn, 3, padding=1), torch.nn.ReLU(),
                                       torch.nn.Conv2d(fpn, fpn, 3, padding=1), torch.nn.ReLU(),
                                       torch.nn.Conv2d(fpn, out_channels, 3, padding=1))

        self.cls_head = tower(anchors * classes)
        self.box_head = tower(anchors * 4)

    def forward(self, images):
        h = self.stem(images)
        features = []
        for i, s in enumerate(self.stages):
            h = s(h)
            if i >= 1:
                features.append(h)  # strides 8, 16, 32
        laterals = [lat(f) for lat, f in zip(self.lateral, features)]
        for i in range(len(laterals) - 2, -1, -1):
            laterals[i] = laterals[i] + F.interpolate(laterals[i + 1], size=laterals[i].shape[-2:], mode="nearest")
        pyramid = [sm(p) for sm, p in zip(self.smooth, laterals)]
        pyramid.append(self.extra(pyramid[-1]))  # stride 64
        return [(self.cls_head(p), self.box_head(p)) for p in pyramid]


net = Detector().cuda()
optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
for step in range(args.steps):
    short = rng.randrange(480, 801, 32)
    long = min(1344, int(short * rng.uniform(1.0, 1.7)))
    height, width = (short, long) if rng.random() < 0.7 else (long, short)
    height, width = -(-height // 32) * 32, -(-width // 32) * 32
    images = torch.randn(args.batch_size, 3, height, width, device="cuda")
    loss = 0.0
    for cls, box in net(images):
        # Anchor targets: about 1% positives, with box offsets where positive.
        positive = torch.rand(cls.shape, device="cuda") < 0.01
        target_box = torch.randn(box.shape, device="cuda")
        box_mask = positive.view(cls.shape[0], anchors, classes, *cls.shape[-2:]).any(dim=2)
        box_mask = box_mask.repeat_interleave(4, dim=1).float()
        box_loss = F.smooth_l1_loss(box, target_box, reduction="none") * box_mask
        loss = loss + F.binary_cross_entropy_with_logits(cls, positive.float())
        loss = loss + box_loss.sum() / box_mask.sum().clamp(min=1.0)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} images {height}x{width} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
