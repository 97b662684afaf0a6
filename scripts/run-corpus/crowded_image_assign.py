"""Training a one-stage anchor-based detector (RetinaNet-style: a convolutional backbone, pyramid
levels P3-P7 with 9 anchors per location, shared classification and box heads, focal loss) on
512x512 images whose box counts are those of ordinary scenes (a few to a few dozen objects), but a
dozen steps in, one image is a dense scene (a crowd or a store shelf) with 3000 annotated boxes.
Targets are assigned per image from the anchor x box IoU matrix, computed on the GPU as
torchvision's box_iou does (broadcast corners): for that image the matrix and its intermediates
are ~49k x 3000 each, and the step runs out in the assignment after the earlier steps completed.
`--cpu-assign-above N` computes the assignment on the CPU for images with more than N boxes, as
MMDetection's `gpu_assign_thr` does.

    python3 crowded_image_assign.py --cap-gib G [--cpu-assign-above 0] [--batch-size 8]
                                    [--crowd-boxes 3000] [--crowded-step 12] [--steps 20]
"""

import argparse
import json
import math
import random
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--cpu-assign-above", type=int, default=0, help="assign on the CPU above N boxes (0: never)")
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--image-size", type=int, default=512)
parser.add_argument("--crowd-boxes", type=int, default=3000)
parser.add_argument("--crowded-step", type=int, default=12)
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
rng = random.Random(2)
classes, channels, anchors_per_cell = 80, 256, 9
strides = [8, 16, 32, 64, 128]


def conv(c_in, c_out, stride=1):
    return torch.nn.Sequential(torch.nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
                               torch.nn.BatchNorm2d(c_out), torch.nn.ReLU(inplace=True))


class Detector(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(conv(3, 32, 2), conv(32, 64, 2))                  # 1/4
        self.c3 = torch.nn.Sequential(conv(64, 128, 2), conv(128, 128))                   # 1/8
        self.c4 = torch.nn.Sequential(conv(128, 256, 2), conv(256, 256))                  # 1/16
        self.c5 = torch.nn.Sequential(conv(256, 512, 2), conv(512, 512))                  # 1/32
        self.lateral = torch.nn.ModuleList([torch.nn.Conv2d(c, channels, 1) for c in (128, 256, 512)])
        self.p6 = torch.nn.Conv2d(512, channels, 3, stride=2, padding=1)
        self.p7 = torch.nn.Conv2d(channels, channels, 3, stride=2, padding=1)
        self.cls_tower = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Conv2d(channels, channels, 3, padding=1),
                                                                   torch.nn.ReLU()) for _ in range(4)])
        self.box_tower = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Conv2d(channels, channels, 3, padding=1),
                                                                   torch.nn.ReLU()) for _ in range(4)])
        self.cls_out = torch.nn.Conv2d(channels, anchors_per_cell * classes, 3, padding=1)
        self.box_out = torch.nn.Conv2d(channels, anchors_per_cell * 4, 3, padding=1)
        torch.nn.init.constant_(self.cls_out.bias, -math.log(99))

    def forward(self, images):
        c3 = self.c3(self.stem(images))
        c4 = self.c4(c3)
        c5 = self.c5(c4)
        p5 = self.lateral[2](c5)
        p4 = self.lateral[1](c4) + F.interpolate(p5, scale_factor=2.0)
        p3 = self.lateral[0](c3) + F.interpolate(p4, scale_factor=2.0)
        p6 = self.p6(c5)
        p7 = self.p7(F.relu(p6))
        b = images.shape[0]
        cls = [self.cls_out(self.cls_tower(p)).permute(0, 2, 3, 1).reshape(b, -1, classes) for p in (p3, p4, p5, p6, p7)]
        box = [self.box_out(self.box_tower(p)).permute(0, 2, 3, 1).reshape(b, -1, 4) for p in (p3, p4, p5, p6, p7)]
        return torch.cat(cls, dim=1), torch.cat(box, dim=1)


def make_anchors(size):
    per_level = []
    for stride in strides:
        n = size // stride
        centers = (torch.arange(n, dtype=torch.float32) + 0.5) * stride
        cy, cx = torch.meshgrid(centers, centers, indexing="ij")
        shapes = [(4 * stride * s * r ** 0.5, 4 * stride * s / r ** 0.5)
                  for s in (1.0, 2 ** (1 / 3), 2 ** (2 / 3)) for r in (0.5, 1.0, 2.0)]
        wh = torch.tensor(shapes)
        c = torch.stack([cx, cy], dim=-1).reshape(-1, 1, 2)
        per_level.append(torch.cat([c - wh / 2, c + wh / 2], dim=-1).reshape(-1, 4))
    return torch.cat(per_level)


def box_iou(boxes1, boxes2):
    """torchvision.ops.box_iou: the pairwise IoU of two sets of (x1, y1, x2, y2) boxes."""
    area1 = (boxes1[:, 2] - boxes1[:, 0]) * (boxes1[:, 3] - boxes1[:, 1])
    area2 = (boxes2[:, 2] - boxes2[:, 0]) * (boxes2[:, 3] - boxes2[:, 1])
    lt = torch.max(boxes1[:, None, :2], boxes2[:, :2])
    rb = torch.min(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[:, :, 0] * wh[:, :, 1]
    union = area1[:, None] + area2 - inter
    return inter / union


@torch.no_grad()
def assign(anchors, gt_boxes, gt_labels):
    """RetinaNet's matching: IoU >= 0.5 positive, < 0.4 negative, and every box's best anchors."""
    on_cpu = args.cpu_assign_above and len(gt_boxes) > args.cpu_assign_above
    device = anchors.device
    if on_cpu:
        anchors, gt_boxes, gt_labels = anchors.cpu(), gt_boxes.cpu(), gt_labels.cpu()
    iou = box_iou(anchors, gt_boxes)
    best_iou, matched = iou.max(dim=1)
    best_per_box = iou.max(dim=0).values
    low_quality = (iou == best_per_box[None, :]).nonzero()[:, 0]
    labels = torch.full((len(anchors),), -1, dtype=torch.long, device=anchors.device)  # -1: ignored
    labels[best_iou < 0.4] = classes                                                        # background
    positive = best_iou >= 0.5
    positive[low_quality] = True
    labels[positive] = gt_labels[matched[positive]]
    return labels.to(device), gt_boxes[matched].to(device), positive.to(device)


def sigmoid_focal_loss(logits, targets, alpha=0.25, gamma=2.0):
    """torchvision.ops.sigmoid_focal_loss, summed."""
    p = torch.sigmoid(logits)
    ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
    return (alpha_t * ce * (1 - p_t) ** gamma).sum()


def random_boxes(n, size):
    centers = torch.rand(n, 2) * size
    wh = (torch.rand(n, 2) * 0.25 + 0.02) * size / (1 + 3 * (n > 100))
    return torch.cat([centers - wh / 2, centers + wh / 2], dim=1).clamp(0, size)


model = Detector().cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, weight_decay=1e-4)
anchors = make_anchors(args.image_size).cuda()
print(f"{len(anchors)} anchors per image", flush=True)
for step in range(args.steps):
    counts = [rng.randint(2, 40) for _ in range(args.batch_size)]
    if step == args.crowded_step:
        counts[0] = args.crowd_boxes
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device="cuda")
    targets = [(random_boxes(n, args.image_size).cuda(), torch.randint(0, classes, (n,)).cuda()) for n in counts]
    cls_out, box_out = model(images)
    cls_losses, box_losses, positives = [], [], 0
    for i, (boxes, labels) in enumerate(targets):
        anchor_labels, matched_boxes, positive = assign(anchors, boxes, labels)
        valid = anchor_labels >= 0
        onehot = F.one_hot(anchor_labels[valid], classes + 1)[:, :classes].float()
        cls_losses.append(sigmoid_focal_loss(cls_out[i][valid], onehot))
        box_losses.append(F.smooth_l1_loss(box_out[i][positive], (matched_boxes[positive] - anchors[positive]) / 64,
                                           reduction="sum"))
        positives += int(positive.sum())
    loss = (torch.stack(cls_losses).sum() + torch.stack(box_losses).sum()) / max(1, positives)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} boxes {sum(counts)} (most in one image {max(counts)}) loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
